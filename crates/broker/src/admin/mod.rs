//! The admin HTTP listener: `/metrics` (Prometheus text), `/healthz` (alive), `/readyz` (its
//! configured links are up), `/state` (JSON: this broker's links, link-state view, trees and
//! summaries, guaranteed delivery and durable subscriptions), `/connz` and `/subsz` (open
//! connections and subscriptions, a page at a time), `DELETE /durable/{name}` (deletes a
//! durable subscription no client holds), and the live web view at `/` with its `/events`
//! stream ([`crate::web`]). Over HTTPS when `[tls] admin` is on (the default once TLS is
//! configured), and behind a login when a users file is (see [`access`]).

pub mod access;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::extract::{Path, Query};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{delete, get, post};
use axum::Router;
use tokio::net::TcpListener;

use crate::context::Context;
use crate::exposition;

/// A request's headers must arrive within this (a client trickling them holds nothing long).
const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// A connection lives at most this long, whatever it does: a slow body or a reader that never
/// reads the response is cut, and a keep-alive scraper simply reconnects.
const CONNECTION_LIFETIME: Duration = Duration::from_secs(60);

/// Most filters of one list a `/state` page shows, `filters=all` included: a snapshot is built
/// under the router's lock, and cloning 100,000 filters of each list held it (and every
/// publish forwarded over a link behind it) for hundreds of milliseconds. Larger lists are
/// paged through with `offset`; their sizes are always under `router.metrics`.
pub const MAX_FILTERS_SHOWN: usize = 10_000;

/// The admin listener's state: the broker, and the one document being built at a time.
struct Admin {
    shared: Arc<Context>,
    /// Held while a `/metrics` or `/state` document is built, so concurrent requests queue
    /// (in arrival order) rather than each building its own beside the others: 2,000
    /// concurrent scrapes each took the router's and the index's locks on a thread of their
    /// own, and a neighbour's round trip waited 0.4-0.65 s behind them.
    last: tokio::sync::Mutex<Option<Built>>,
}

/// A document built for `key`, from a snapshot taken after `started`.
struct Built {
    key: String,
    started: Instant,
    body: Result<String, String>,
}

impl Admin {
    /// The document `key` as `build` makes it, from a snapshot taken after this call: the one
    /// built while this request waited, if it is for the same key, else a fresh one, built
    /// off the runtime's workers. So a burst of identical requests costs one or two builds,
    /// and none answers with what was true before it was asked.
    async fn built(
        self: Arc<Self>,
        key: String,
        build: impl FnOnce(&Context) -> Result<String, String> + Send + 'static,
    ) -> Result<String, String> {
        let asked = Instant::now();
        let mut last = self.last.lock().await;
        if let Some(built) = last.as_ref().filter(|built| built.key == key && built.started >= asked) {
            return built.body.clone();
        }
        let started = Instant::now();
        let shared = Arc::clone(&self.shared);
        let body = tokio::task::spawn_blocking(move || build(&shared)).await.unwrap_or_else(|e| Err(e.to_string()));
        *last = Some(Built { key, started, body: body.clone() });
        body
    }
}

/// Serves until shutdown. Each connection through hyper directly rather than `axum::serve`,
/// which has no header timeout: the admin port must not be held by slow requests.
pub async fn serve(listener: TcpListener, shared: Arc<Context>, tls: Option<Arc<crate::tls::Tls>>) {
    let shutdown = shared.shutdown.clone();
    let tasks = shared.tasks.clone();
    let admin = Arc::new(Admin { shared: Arc::clone(&shared), last: tokio::sync::Mutex::new(None) });
    let app = Router::new()
        .route("/metrics", get(metrics).with_state(Arc::clone(&admin)))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/state", get(state).with_state(admin))
        .route("/connz", get(connz))
        .route("/subsz", get(subsz))
        .route("/durable/{name}", delete(delete_durable))
        .route("/cell/forget/{broker}", post(forget_broker))
        .route("/cell/unforget/{broker}", post(readmit_broker))
        .merge(crate::web::routes(&shared))
        .with_state(Arc::clone(&shared));
    let door = shared.security.as_ref().map(|guard| Arc::new(access::Door::new(Arc::clone(guard))));
    loop {
        let stream = tokio::select! {
            () = shutdown.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(_) => {
                    // Out of descriptors and the like: back off rather than spin.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let app = app.clone();
        let shutdown = shutdown.clone();
        let (tls, door) = (tls.clone(), door.clone());
        tasks.spawn(async move {
            let Some(tls) = tls else { return connection(stream, app, door.map(|door| (door, None)), shutdown).await };
            match tls.accept(stream, HEADER_TIMEOUT).await {
                crate::tls::Accepted::Tls(stream) => {
                    // Verified by the handshake (with `[tls] ca`): a login when no header is.
                    let names: Option<Arc<[String]>> = crate::tls::client_names(&stream).map(Into::into);
                    connection(*stream, app, door.map(|door| (door, names)), shutdown).await
                }
                crate::tls::Accepted::Plaintext(mut stream) => {
                    use tokio::io::AsyncWriteExt as _;
                    let body = "this port speaks HTTPS only (tls.admin): use https:// and the broker's CA\n";
                    let response = format!(
                        "HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = tokio::time::timeout(HEADER_TIMEOUT, stream.write_all(response.as_bytes())).await;
                    // The request is still unread: closing now would reset the connection,
                    // which can discard the answer before the client reads it.
                    crate::tls::close_gently(stream).await;
                }
                crate::tls::Accepted::Failed => {}
            }
        });
    }
}

/// The admin port's door, and the names of the client certificate the connection's TLS
/// handshake verified (with `[tls] ca`), the login of a request without a header.
type Guarded = (Arc<access::Door>, Option<Arc<[String]>>);

/// Serves one connection, plain or TLS, for at most its lifetime; each request first through
/// the door when there is one, with the names of the client certificate the connection's
/// handshake verified, if any.
async fn connection<I>(io: I, app: Router, door: Option<Guarded>, shutdown: tokio_util::sync::CancellationToken)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |request: axum::extract::Request<hyper::body::Incoming>| {
        let mut app = app.clone();
        let door = door.clone();
        async move {
            if let Some((door, certificate)) = door {
                let (method, path) = (request.method(), request.uri().path());
                if let Err((status, why)) = door.admit(method, path, request.headers(), certificate.as_deref()).await {
                    return Ok(refused(status, why));
                }
            }
            tower_service::Service::call(&mut app, request).await
        }
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .serve_connection(hyper_util::rt::TokioIo::new(io), service);
    tokio::select! {
        _ = tokio::time::timeout(CONNECTION_LIFETIME, connection) => {}
        () = shutdown.cancelled() => {}
    }
}

/// A refused admin request: 401 asks a browser for a login.
fn refused(status: StatusCode, why: &'static str) -> axum::response::Response {
    let mut response = (status, [(header::CONTENT_TYPE, "text/plain")], format!("{why}\n")).into_response();
    if status == StatusCode::UNAUTHORIZED {
        let challenge = axum::http::HeaderValue::from_static("Basic realm=\"tidings admin\", charset=\"UTF-8\"");
        response.headers_mut().insert(header::WWW_AUTHENTICATE, challenge);
    }
    response
}

/// OpenMetrics for a scraper that asks for it (Prometheus does), else the classic text format;
/// the content type always says which.
async fn metrics(State(admin): State<Arc<Admin>>, headers: HeaderMap) -> impl IntoResponse {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let openmetrics = exposition::wants_openmetrics(accept);
    // Built off the runtime's workers, as `/state` is: the process metrics count
    // `/proc/self/fd`, which with thousands of connections held a worker for milliseconds at
    // every scrape, and every session on it waited.
    let key = if openmetrics { "metrics openmetrics" } else { "metrics classic" };
    let built = admin
        .built(key.to_string(), move |shared| {
            shared.core.dispatcher.report_match_stats();
            shared.core.cluster.report_metrics();
            let mut text = String::new();
            prometheus_client::encoding::text::encode(&mut text, &shared.registry).map_err(|e| e.to_string())?;
            Ok(if openmetrics { text } else { exposition::classic(&text) })
        })
        .await;
    match built {
        Ok(text) if openmetrics => (StatusCode::OK, [(header::CONTENT_TYPE, exposition::OPENMETRICS)], text),
        Ok(text) => (StatusCode::OK, [(header::CONTENT_TYPE, exposition::CLASSIC)], text),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, [(header::CONTENT_TYPE, "text/plain")], e),
    }
}

async fn healthz(State(shared): State<Arc<Context>>) -> impl IntoResponse {
    if shared.shutdown.is_cancelled() {
        (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n")
    } else {
        (StatusCode::OK, "ok\n")
    }
}

/// The filter page a `/state` query asks for; anything unreadable is the default.
fn filter_page(query: &str) -> tidings_route::FilterPage {
    let mut page = tidings_route::FilterPage { offset: 0, limit: 100 };
    for (key, value) in query.split('&').filter_map(|pair| pair.split_once('=')) {
        match (key, value) {
            ("filters", "all") => page.limit = MAX_FILTERS_SHOWN,
            ("filters", n) => page.limit = n.parse().unwrap_or(page.limit),
            ("offset", n) => page.offset = n.parse().unwrap_or(0),
            _ => {}
        }
    }
    page.limit = page.limit.min(MAX_FILTERS_SHOWN);
    page
}

/// Ready to take traffic: not shutting down, and at least as many broker links up as peers
/// configured to dial (a broker whose links are down serves only its own clients). 503 until
/// then; the body says what is missing.
async fn readyz(State(shared): State<Arc<Context>>) -> impl IntoResponse {
    let links_up = shared.metrics.links_up.get().max(0) as usize;
    let peers = shared.config.peer.len();
    let ready = !shared.shutdown.is_cancelled() && links_up >= peers;
    let body = serde_json::json!({
        "ready": ready,
        "shutting_down": shared.shutdown.is_cancelled(),
        "links_up": links_up,
        "peers_configured": peers,
    });
    let status = if ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (status, [(header::CONTENT_TYPE, "application/json")], body.to_string())
}

/// The cluster's state, with guaranteed delivery's under `guaranteed`.
/// `/state?filters=N&offset=M` (or `filters=all`): every filter list (local interest,
/// summaries, children's summaries) is shown from its `offset`th filter, at most `filters` of
/// them (default 100, at most [`MAX_FILTERS_SHOWN`]); their sizes are always under
/// `router.metrics`.
async fn state(State(admin): State<Arc<Admin>>, uri: axum::http::Uri) -> impl IntoResponse {
    let page = filter_page(uri.query().unwrap_or(""));
    // Built off the runtime's workers: a task that computes for long on one stops the
    // runtime's socket polling until it yields, and every client waits.
    let key = format!("state {} {}", page.offset, page.limit);
    let built = admin
        .built(key, move |shared| {
            let json = serde_json::to_value(shared.core.cluster.state(page)).and_then(|mut state| {
                if let serde_json::Value::Object(map) = &mut state {
                    map.insert("guaranteed".into(), serde_json::to_value(shared.core.guaranteed.state())?);
                    let (topics, bytes) = shared.core.dispatcher.retained_size();
                    map.insert("retained".into(), serde_json::json!({ "topics": topics, "bytes": bytes }));
                }
                serde_json::to_string_pretty(&state)
            });
            json.map_err(|e| e.to_string())
        })
        .await;
    match built {
        Ok(json) => (StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], json),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, [(header::CONTENT_TYPE, "text/plain")], e),
    }
}

/// A list page a query asks for (`offset`, `limit`) and, for `/subsz`, a pattern to look for.
#[derive(serde::Deserialize, Default)]
struct ListQuery {
    offset: Option<usize>,
    limit: Option<usize>,
    pattern: Option<String>,
}

impl ListQuery {
    /// From 0 by default; at most 100 entries by default and 10,000 in any case.
    fn page(&self) -> (usize, usize) {
        (self.offset.unwrap_or(0), self.limit.unwrap_or(100).min(10_000))
    }
}

fn json<T: serde::Serialize>(value: &T) -> (StatusCode, [(header::HeaderName, &'static str); 1], String) {
    match serde_json::to_string_pretty(value) {
        Ok(body) => (StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], body),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, [(header::CONTENT_TYPE, "text/plain")], e.to_string()),
    }
}

/// `/connz?offset=N&limit=M`: open connections, oldest first, with their queue depth and
/// counts; `total` is how many there are in all.
async fn connz(State(shared): State<Arc<Context>>, Query(query): Query<ListQuery>) -> impl IntoResponse {
    let (offset, limit) = query.page();
    json(&shared.connections.page(offset, limit))
}

/// `/subsz?offset=N&limit=M&pattern=TEXT`: subscriptions of open connections (only those whose
/// pattern contains TEXT, when given), by connection, and every queue group with its members;
/// at a guaranteed queue groups' home, `remote_members` too: per group, its members at other
/// brokers (no connection here lists them).
async fn subsz(State(shared): State<Arc<Context>>, Query(query): Query<ListQuery>) -> impl IntoResponse {
    let (offset, limit) = query.page();
    let subsz = shared.connections.subsz(offset, limit, query.pattern.as_deref());
    let remote = shared.core.guaranteed.state().remote_members;
    match serde_json::to_value(&subsz) {
        Ok(serde_json::Value::Object(mut map)) if !remote.is_empty() => {
            map.insert("remote_members".into(), serde_json::json!(remote));
            json(&map)
        }
        _ => json(&subsz),
    }
}

/// `DELETE /durable/{name}`: 200 deleted, 404 no such name, 409 held by a client now.
/// `POST /cell/forget/{broker}` (`tidings cell forget`): `broker` is gone from the cell for
/// good; the replica groups that have it as a member remove it (docs/replication.md,
/// "Membership"). 409 when it cannot be forgotten (this broker, or linked now).
async fn forget_broker(State(shared): State<Arc<Context>>, Path(broker): Path<String>) -> impl IntoResponse {
    cell_change(&shared, &broker, false).await
}

/// `POST /cell/unforget/{broker}` (`tidings cell unforget`): this broker no longer forgets
/// `broker` and accepts its links again; the operator runs it on every broker of the cell
/// (docs/replication.md, "Membership changes").
async fn readmit_broker(State(shared): State<Arc<Context>>, Path(broker): Path<String>) -> impl IntoResponse {
    cell_change(&shared, &broker, true).await
}

async fn cell_change(shared: &Context, broker: &str, readmit: bool) -> (StatusCode, String) {
    if broker.is_empty() || broker.len() > 255 || broker.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return (StatusCode::BAD_REQUEST, format!("{broker:?} is not a broker name\n"));
    }
    let broker = tidings_route::BrokerName::new(broker);
    let guaranteed = &shared.core.guaranteed;
    let answer = match readmit {
        true => guaranteed.readmit_broker(broker).await,
        false => guaranteed.forget_broker(broker).await,
    };
    match answer {
        Ok(text) => (StatusCode::OK, text),
        Err(why) => (StatusCode::CONFLICT, format!("{why}\n")),
    }
}

async fn delete_durable(State(shared): State<Arc<Context>>, Path(name): Path<String>) -> impl IntoResponse {
    match shared.core.guaranteed.delete_durable_by_name(&name) {
        Some(true) => (StatusCode::OK, format!("deleted durable subscription {name:?}\n")),
        Some(false) => {
            (StatusCode::CONFLICT, format!("durable subscription {name:?} is held by a client; close it first\n"))
        }
        None => (StatusCode::NOT_FOUND, format!("no durable subscription {name:?}\n")),
    }
}
