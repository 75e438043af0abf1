//! Routing's answers as delivery routes: what the driver feeds each broker's engine after
//! every step (only when a route changed), with children that have no interest below them
//! left out of the tree.

use tidings_delivery::{CellId, ChildLink, PubendId, StreamRoute, UpstreamCell};
use tidings_route::{BrokerName, PubendRoute, Via};

use crate::gd::layer::{Command, MATE_CELL};
use crate::gd::run::GdRun;
use crate::net::home_pubend;

impl GdRun {
    /// Mirrors the open connections into the world and feeds every changed route.
    pub(super) fn refresh(&mut self) {
        let links = self.net.wires.iter().filter(|(_, w)| w.conn.is_some()).map(|(k, _)| *k).collect();
        self.world.borrow_mut().links = links;
        let pubends: Vec<(usize, PubendId)> = self.world.borrow().pubends.iter().map(|(&n, &p)| (n, p)).collect();
        for (home, pubend) in pubends {
            let reference = home_pubend(&self.net.nodes[home].name);
            let raw: Vec<Option<StreamRoute>> = (0..self.net.nodes.len())
                .map(|node| {
                    let router = self.net.router(node)?;
                    Some(router.pubend_route(&reference).map(|r| self.stream_route(node, &r)).unwrap_or_default())
                })
                .collect();
            let interested = self.interested(&raw);
            let mut changed = Vec::new();
            for (node, route) in raw.into_iter().enumerate() {
                let Some(mut route) = route else { continue };
                route.children.retain(|child| interested[child.broker.0 as usize]);
                let Some(layer) = self.net.nodes[node].layer.as_ref() else { continue };
                if layer.routes.get(&pubend) != Some(&route) {
                    changed.push((node, route));
                }
            }
            // The truth the matchers read is the whole new tree before any engine hears of it:
            // a parent fed first must not judge its child cell by the child's stale route.
            for (node, route) in &changed {
                self.world.borrow_mut().routes.insert((*node, pubend), route.clone());
            }
            for (node, route) in changed {
                self.command(node, Command::Route { pubend, route });
            }
        }
    }

    /// Per node: whether it or a node below it in the routes has a live subscriber. A child
    /// without one is not in the pubend's tree (gd-protocol §9.1: it is not waited for).
    fn interested(&self, routes: &[Option<StreamRoute>]) -> Vec<bool> {
        let world = self.world.borrow();
        let mut interested: Vec<bool> =
            (0..routes.len()).map(|node| world.subs.values().any(|sub| sub.node == node && !sub.gone)).collect();
        // Fixed point over the child relation (routes may briefly disagree and even loop).
        loop {
            let mut changed = false;
            for (node, route) in routes.iter().enumerate() {
                let below = route.iter().flat_map(|r| &r.children).any(|c| interested[c.broker.0 as usize]);
                if below && !interested[node] {
                    interested[node] = true;
                    changed = true;
                }
            }
            if !changed {
                return interested;
            }
        }
    }

    /// Routing's answer as delivery's route: upstream by cell (a cell mate is a pseudo cell
    /// of its own), children the child cells (at the entry broker) and the linked mates.
    fn stream_route(&self, me: usize, route: &PubendRoute) -> StreamRoute {
        let world = self.world.borrow();
        let cell = |node: usize| {
            if world.cell_of[node] == world.cell_of[me] {
                CellId(MATE_CELL + node as u32)
            } else {
                CellId(world.cell_of[node])
            }
        };
        let broker = |name: &BrokerName| tidings_delivery::BrokerId(self.net.node_of(name) as u32);
        let upstream = route.upstream.first().map(|first| {
            let first_cell = cell(self.net.node_of(first));
            let brokers =
                route.upstream.iter().filter(|b| cell(self.net.node_of(b)) == first_cell).map(broker).collect();
            UpstreamCell { cell: first_cell, brokers }
        });
        let mut children = Vec::new();
        if route.entry == self.net.nodes[me].name {
            for child in &route.children {
                let via = match &child.via {
                    Some(Via::Direct) => None,
                    Some(Via::Mate(mate)) => Some(broker(mate)),
                    None => continue,
                };
                let cell = CellId(world.cell_of[self.net.node_of(&child.broker)]);
                children.push(ChildLink { cell, broker: broker(&child.broker), via });
            }
            for mate in &route.mates {
                let node = self.net.node_of(mate);
                children.push(ChildLink { cell: cell(node), broker: broker(mate), via: None });
            }
        }
        StreamRoute { upstream, children }
    }
}
