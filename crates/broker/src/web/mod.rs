//! The live web view served by the admin listener at `/`: one page that draws the broker
//! network this broker's link-state view knows (brokers by cell, links up or down, every
//! link's rates and queues: this broker's own as measured here, the others' as their ends
//! report them over the links) and this broker's panel (connections, subscriptions, rates,
//! drops, CPU, memory, guaranteed delivery with publish rates and nack ranges, durable
//! backlogs), updated once a second over Server-Sent Events at `/events`.
//!
//! Everything the page needs is in the binary (`include_str!`): an operator's browser may have
//! no way out to a CDN, and the page must show the version of itself that matches the broker.
//! The chart library is uPlot 1.6.32 (MIT, `assets/uPlot.LICENSE`), taken from the npm
//! registry's `uplot` package (`dist/uPlot.iife.min.js`, `dist/uPlot.min.css`).

mod seen;
mod snapshot;
mod sse;

use std::sync::Arc;

use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use crate::context::Context;

pub use snapshot::Overview;
pub use sse::MAX_VIEWERS;

/// The page's files: path, content type, body.
const ASSETS: [(&str, &str, &str); 5] = [
    ("/", "text/html; charset=utf-8", include_str!("assets/index.html")),
    ("/web/app.js", "text/javascript; charset=utf-8", include_str!("assets/app.js")),
    ("/web/app.css", "text/css; charset=utf-8", include_str!("assets/app.css")),
    ("/web/uPlot.iife.min.js", "text/javascript; charset=utf-8", include_str!("assets/uPlot.iife.min.js")),
    ("/web/uPlot.min.css", "text/css; charset=utf-8", include_str!("assets/uPlot.min.css")),
];

/// The page's routes, for the admin listener to merge: the files, and `/events` (one stream
/// per viewer, at most [`MAX_VIEWERS`] at a time, 503 beyond). The snapshot producer runs
/// on the broker's task tracker until shutdown, building only while someone watches.
pub fn routes(shared: &Arc<Context>) -> Router<Arc<Context>> {
    let hub = sse::Hub::start(shared);
    let mut router = Router::new().route("/events", get(sse::events).with_state(hub));
    for (path, content_type, body) in ASSETS {
        router = router.route(path, get(move || asset(content_type, body)));
    }
    router
}

/// One embedded file; cached by the browser for a minute only, so an upgraded broker's page
/// is picked up without a forced reload.
async fn asset(content_type: &'static str, body: &'static str) -> impl IntoResponse {
    (StatusCode::OK, [(header::CONTENT_TYPE, content_type), (header::CACHE_CONTROL, "max-age=60")], body)
}
