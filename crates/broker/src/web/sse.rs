//! `/events`: the web view's Server-Sent Events. One producer builds an update every
//! [`EVERY`] while at least one viewer is connected (sooner when links or routes change, at
//! most every [`SOONEST`]) and publishes it, serialized once, on a watch channel; each viewer's stream sends the latest update it has not sent yet. So the
//! rate is bounded whatever the network's size, and a viewer costs one string copy a second,
//! not a snapshot; a slow viewer skips updates rather than queueing them.
//!
//! The admin listener cuts every connection after its lifetime (60 s), the event stream's
//! too: the page's `EventSource` reconnects by itself (after [`RETRY`], which each event
//! sets) and gets the latest update at once. Exempting the stream would keep the one rule that
//! nothing holds the admin port long; a reconnect a minute costs one request.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

use super::snapshot::Producer;
use crate::context::Context;

/// How often an update is built and sent at least, while someone watches.
const EVERY: Duration = Duration::from_secs(1);
/// How soon after the last update a change of links or routes is sent: at most 4 updates a
/// second, whatever happens in the network.
const SOONEST: Duration = Duration::from_millis(250);
/// How often the producer looks for such a change (three counters).
const LOOK: Duration = Duration::from_millis(100);
/// How long a disconnected page waits before reconnecting.
const RETRY: Duration = Duration::from_millis(500);
/// Viewers at a time; the next one gets 503 until one leaves. Each holds a connection and a
/// task, and a browser tab left open for days should not add up to an unbounded number.
pub const MAX_VIEWERS: usize = 16;

/// The producer's channel and the viewers' permits.
pub(super) struct Hub {
    updates: watch::Receiver<Arc<str>>,
    viewers: Arc<Semaphore>,
}

impl Hub {
    /// Starts the producer on the broker's task tracker; it stops at shutdown.
    pub(super) fn start(shared: &Arc<Context>) -> Arc<Hub> {
        let (tx, updates) = watch::channel(Arc::<str>::from(""));
        let shared = Arc::clone(shared);
        let tasks = shared.tasks.clone();
        tasks.spawn(produce(shared, tx));
        Arc::new(Hub { updates, viewers: Arc::new(Semaphore::new(MAX_VIEWERS)) })
    }
}

/// Builds an update every [`EVERY`] while someone watches (the hub's own receiver aside), and
/// sooner (but not within [`SOONEST`] of the last) when links or routes changed, so a cut link
/// shows within a fraction of a second rather than a whole period later.
async fn produce(shared: Arc<Context>, tx: watch::Sender<Arc<str>>) {
    let mut producer = Producer::default();
    let mut ticks = tokio::time::interval(LOOK);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut built: Option<(Instant, Changes)> = None;
    loop {
        tokio::select! {
            () = shared.shutdown.cancelled() => return,
            _ = ticks.tick() => {}
        }
        if tx.receiver_count() <= 1 {
            // Nobody watches: forget the last update, so the next viewer waits for a fresh one
            // rather than being shown an old network, and rates restart from then.
            if !tx.borrow().is_empty() {
                tx.send_replace(Arc::from(""));
                producer.forget_rates();
            }
            built = None;
            continue;
        }
        let changes = changes(&shared);
        let due = built
            .as_ref()
            .is_none_or(|(at, then)| at.elapsed() >= EVERY || (*then != changes && at.elapsed() >= SOONEST));
        if !due {
            continue;
        }
        built = Some((Instant::now(), changes));
        let overview = producer.build(&shared);
        match serde_json::to_string(&overview) {
            Ok(json) => {
                tx.send_replace(Arc::from(json));
            }
            Err(e) => tracing::warn!("web view update not serialized: {e}"),
        }
    }
}

/// What moves when the network's shape does: routes recomputed (a link of any broker came or
/// went, as the link-state view learnt), this broker's links established, and up.
type Changes = (u64, u64, i64);

fn changes(shared: &Context) -> Changes {
    let m = &shared.metrics;
    (m.route_recomputations.get(), m.links_established.get(), m.links_up.get())
}

/// One viewer's stream, or 503 when [`MAX_VIEWERS`] are connected.
pub(super) async fn events(State(hub): State<Arc<Hub>>) -> Response {
    let Ok(permit) = Arc::clone(&hub.viewers).try_acquire_owned() else {
        let body = format!("at most {MAX_VIEWERS} viewers of the web view at a time; try again later\n");
        return (StatusCode::SERVICE_UNAVAILABLE, [(header::RETRY_AFTER, "5")], body).into_response();
    };
    let mut updates = hub.updates.clone();
    // The latest update at once, if there is one yet.
    updates.mark_changed();
    let stream = futures::stream::unfold((updates, permit), next_event);
    Sse::new(stream).into_response()
}

/// The next update not sent yet (the permit travels with the stream and is released when the
/// viewer goes); the stream ends when the producer does.
async fn next_event(
    (mut updates, permit): (watch::Receiver<Arc<str>>, OwnedSemaphorePermit),
) -> Option<(Result<Event, Infallible>, (watch::Receiver<Arc<str>>, OwnedSemaphorePermit))> {
    loop {
        updates.changed().await.ok()?;
        let update = Arc::clone(&updates.borrow_and_update());
        if !update.is_empty() {
            let event = Event::default().retry(RETRY).data(&*update);
            return Some((Ok(event), (updates, permit)));
        }
    }
}
