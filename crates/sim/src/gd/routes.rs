//! Routing's answers as delivery routes: what the driver feeds each broker's engine after
//! every step (only when a route changed), with the downstreams whose vouched summaries are
//! empty left out of the tree (as the broker's router knows it, not from the run's truth).

use tidings_delivery::{CellId, ChildLink, PubendId, StreamRoute, UpstreamCell};
use tidings_route::matching::RouteFilter;
use tidings_route::{BrokerName, PubendRoute, Router, Via};

use crate::gd::layer::{Command, MATE_CELL};
use crate::gd::run::GdRun;
use crate::net::home_pubend;

impl GdRun {
    /// Mirrors the open connections into the world and feeds every changed route.
    pub(super) fn refresh(&mut self) {
        let links = self.net.wires.iter().filter(|(_, w)| w.conn.is_some()).map(|(k, _)| *k).collect();
        self.world.borrow_mut().links = links;
        let pubends: Vec<(usize, PubendId)> = self.world.borrow().pubends.iter().map(|(&n, &p)| (n, p)).collect();
        let brokers = self.net.nodes.len();
        self.routes.resize(brokers * brokers, None);
        for (home, pubend) in pubends {
            for node in 0..brokers {
                let Some(router) = self.net.router(node) else { continue };
                let at = router.route_epoch();
                let slot = home * brokers + node;
                if !matches!(&self.routes[slot], Some((computed, _)) if *computed == at) {
                    let reference = home_pubend(&self.net.nodes[home].name);
                    let route = router.pubend_route(&reference).map(|r| self.stream_route(node, router, &r));
                    self.routes[slot] = Some((at, route.unwrap_or_default()));
                }
                let (Some(layer), Some((_, route))) = (self.net.nodes[node].layer.as_ref(), &self.routes[slot]) else {
                    continue;
                };
                if layer.routes.get(&pubend) != Some(route) {
                    let route = route.clone();
                    self.command(node, Command::Route { pubend, route });
                }
            }
        }
    }

    /// Routing's answer as delivery's route: upstream by cell (a cell mate is a pseudo cell
    /// of its own), children the child cells (at the entry broker) and the linked mates that
    /// are in the pubend's tree by the router's vouched summaries (gd-protocol §9.1: one that
    /// could never match is not waited for).
    fn stream_route(&self, me: usize, router: &Router<RouteFilter>, route: &PubendRoute) -> StreamRoute {
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
            for child in route.children.iter().filter(|c| router.child_cell_in_tree(&route.pubend, &c.cell)) {
                let via = match &child.via {
                    Some(Via::Direct) => None,
                    Some(Via::Mate(mate)) => Some(broker(mate)),
                    None => continue,
                };
                let cell = CellId(world.cell_of[self.net.node_of(&child.broker)]);
                children.push(ChildLink { cell, broker: broker(&child.broker), via });
            }
            for mate in route.mates.iter().filter(|mate| router.mate_in_tree(mate)) {
                let node = self.net.node_of(mate);
                children.push(ChildLink { cell: cell(node), broker: broker(mate), via: None });
            }
        }
        StreamRoute { upstream, children }
    }
}
