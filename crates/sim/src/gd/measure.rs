//! The nack-consolidation measurement: a blackout of one link's delivery frames under steady
//! traffic.

use tidings_route::{BrokerName, Topology};

use crate::gd::run::{GdRun, Mode};
use crate::gd::{settings, Stats};
use crate::scenario::Plan;
use crate::topics::filter;

/// The nack-consolidation measurement: `publisher` publishes every 5 ms for 3 s into a
/// network whose other brokers each hold one catch-all guaranteed subscriber; from 1 s on,
/// every delivery frame on the wire between `a` and `b` is lost for `blackout_ms` (the
/// routing link stays up), then the network settles. Returns the run's figures.
pub fn measure_blackout(
    topology: &Topology,
    seed: u64,
    publisher: &BrokerName,
    wire: (&BrokerName, &BrokerName),
    blackout_ms: u64,
) -> Result<Stats, String> {
    let plan = Plan { seed, steps: 0, skip: Default::default() };
    let mut run = GdRun::with_publisher(topology, &plan, Mode::LOSSY, settings(), Some(publisher));
    let home = run.net.node_of(publisher);
    run.pump(500);
    for node in (0..run.net.nodes.len()).filter(|&n| n != home) {
        run.subscribe_with(node, filter(">", None), false);
    }
    run.pump(500);
    let (a, b) = (run.net.node_of(wire.0), run.net.node_of(wire.1));
    for slot in 0..600u64 {
        if slot == 200 {
            run.world.borrow_mut().blackout = Some((a.min(b), a.max(b)));
        }
        if slot * 5 == 1000 + blackout_ms {
            run.world.borrow_mut().blackout = None;
        }
        run.publish_at(home);
        run.pump(5);
        run.check()?;
    }
    run.world.borrow_mut().blackout = None;
    run.settle()?;
    Ok(run.stats())
}
