//! The admin HTTP listener: `/metrics` (Prometheus text), `/healthz`, and `/state` (JSON: this
//! broker's links, link-state view, trees and summaries).

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use tokio::net::TcpListener;

use crate::exposition;
use crate::server::Shared;

/// Serves until shutdown.
pub async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    let shutdown = shared.shutdown.clone();
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/state", get(state))
        .with_state(shared);
    let _ = axum::serve(listener, app).with_graceful_shutdown(async move { shutdown.cancelled().await }).await;
}

/// OpenMetrics for a scraper that asks for it (Prometheus does), else the classic text format;
/// the content type always says which.
async fn metrics(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> impl IntoResponse {
    shared.dispatcher.report_match_stats();
    shared.cluster.report_metrics();
    let mut text = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut text, &shared.registry) {
        return (StatusCode::INTERNAL_SERVER_ERROR, [(header::CONTENT_TYPE, "text/plain")], e.to_string());
    }
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    if exposition::wants_openmetrics(accept) {
        (StatusCode::OK, [(header::CONTENT_TYPE, exposition::OPENMETRICS)], text)
    } else {
        (StatusCode::OK, [(header::CONTENT_TYPE, exposition::CLASSIC)], exposition::classic(&text))
    }
}

async fn healthz(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    if shared.shutdown.is_cancelled() {
        (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n")
    } else {
        (StatusCode::OK, "ok\n")
    }
}

async fn state(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    match serde_json::to_string_pretty(&shared.cluster.state()) {
        Ok(json) => (StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], json),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, [(header::CONTENT_TYPE, "text/plain")], e.to_string()),
    }
}
