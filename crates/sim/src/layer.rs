//! The extension point for a second protocol layer per broker (the guaranteed-delivery core):
//! its own frames on the simulated network, its soft state lost at a crash, and a store that
//! survives crashes minus what the model says was not synced.
//!
//! A layer is driven exactly like a pure core in production: `handle(now, input, &mut out)`
//! and `next_deadline()`. The simulator feeds it its frames, the router's
//! [`GdAction`]s of its broker, and time; it carries out what the layer asks (send a frame,
//! feed the router an input). Frames of a layer travel on their own lossy channel, which may
//! lose, duplicate, reorder and delay them (guaranteed delivery must survive that), while
//! routing's frames ride an in-order stream per link, as TCP gives them.

use tidings_route::matching::RouteFilter;
use tidings_route::{BrokerName, GdAction, Input, Millis, Router};

/// What the simulator tells a layer's node.
#[derive(Clone, Debug)]
pub enum LayerInput<Frame> {
    /// A frame from a peer.
    Frame {
        /// The sender.
        from: BrokerName,
        /// The frame.
        frame: Frame,
    },
    /// The broker's router reported something for guaranteed delivery.
    Routing(GdAction),
    /// Time passed (at or after the node's `next_deadline`).
    Tick,
}

/// What a layer's node asks the simulator to do.
#[derive(Clone, Debug)]
pub enum LayerOutput<Frame> {
    /// Send a frame to a peer (dropped unless a connection is open).
    Send {
        /// The peer.
        to: BrokerName,
        /// The frame.
        frame: Frame,
    },
    /// Feed the broker's router an input (track a pubend, answer tick requests, ...).
    Route(Input<RouteFilter>),
}

/// A protocol layer run on every simulated broker.
pub trait Layer {
    /// Its frames between brokers.
    type Frame: Clone + std::fmt::Debug;
    /// A broker's soft state: built at start, dropped at a crash.
    type Node;
    /// A broker's durable store: survives crashes, minus what [`Layer::crash`] drops.
    type Store: Default;

    /// A broker starts (or restarts) over its store.
    fn start(&self, broker: &BrokerName, store: &mut Self::Store) -> Self::Node;

    /// A broker crashed: its node is gone; drop from the store whatever was not synced.
    fn crash(&self, store: &mut Self::Store);

    /// The incarnation a broker (re)starting at `now` announces, its previous life's being
    /// `previous`: by default the next number; a layer with a data directory applies the
    /// broker's own rule over it (an empty directory forgets the counter).
    fn incarnation(&self, _store: &mut Self::Store, _now: Millis, previous: u64) -> u64 {
        previous + 1
    }

    /// Feeds one input to a node. `router` is the broker's router (`None` while it is down),
    /// lent for the input: what the layer may consult as a production broker would, e.g. for
    /// filter verdicts from the summaries.
    fn handle(
        &self,
        node: &mut Self::Node,
        store: &mut Self::Store,
        router: &mut Option<Router<RouteFilter>>,
        now: Millis,
        input: LayerInput<Self::Frame>,
        out: &mut Vec<LayerOutput<Self::Frame>>,
    );

    /// When the node next needs a [`LayerInput::Tick`].
    fn next_deadline(&self, node: &Self::Node) -> Option<Millis>;

    /// Whether the layer answers [`GdAction::NextTicksWanted`] itself (a delivery core knows
    /// its pubends' next ticks); otherwise the simulator answers with the publish count.
    fn answers_ticks(&self) -> bool {
        false
    }

    /// How long routers hold a departed link's interest (`RouterSettings::departed_interest_ms`):
    /// none for routing alone, the departed retention for guaranteed delivery.
    fn departed_interest_ms(&self) -> u64 {
        0
    }
}

/// No second layer: routing alone.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoLayer;

impl Layer for NoLayer {
    type Frame = ();
    type Node = ();
    type Store = ();

    fn start(&self, _: &BrokerName, _: &mut ()) {}

    fn crash(&self, _: &mut ()) {}

    fn handle(
        &self,
        _: &mut (),
        _: &mut (),
        _: &mut Option<Router<RouteFilter>>,
        _: Millis,
        _: LayerInput<()>,
        _: &mut Vec<LayerOutput<()>>,
    ) {
    }

    fn next_deadline(&self, _: &()) -> Option<Millis> {
        None
    }
}
