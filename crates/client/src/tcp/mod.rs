//! The TCP transport: the operations a [`Client`](crate::Client) performs on the shared write
//! buffer (`outbox.rs`), and the connection's tasks and reconnect loop (`driver.rs`).
//!
//! No per-message channel or task hop: `publish` encodes into the buffer under a lock and
//! wakes the writer only when the buffer was empty. Requests that need an answer (subscribe,
//! ping, flush) append a PING and wait for its PONG, which the broker sends after handling
//! every earlier frame.

mod driver;

pub(crate) use driver::addresses;
mod outbox;
mod stream;

use parking_lot::Mutex;
use tidings_wire::{Frame, Notice, Ping, ReasonCode, SubId, Subscribe, Unsubscribe, Welcome};
use tokio::sync::{oneshot, Notify};
use tokio::time::{timeout, timeout_at, Instant};
use tracing::{debug, warn};

use crate::error::ClientError;
use crate::event::ConnectionEvent;
use crate::registry::Registry;
use crate::shared::{Route, Shared};
use crate::waiters::Outcome;

pub(crate) use driver::connect;
use outbox::{Outbox, Push, State, Take};

/// How often `subscribe` re-confirms a subscription whose first PONG was lost with its
/// connection (each try waits for a reconnect) before giving up.
const SUBSCRIBE_TRIES: usize = 4;

/// The TCP half of a client's shared state.
#[derive(Debug)]
pub(crate) struct TcpLink {
    outbox: Mutex<Outbox>,
    /// Wakes the writer; notified only when the buffer goes from empty to non-empty.
    writer_wake: Notify,
    /// Wakes callers waiting for buffer space or for the state to change.
    progress: Notify,
}

impl TcpLink {
    pub(crate) fn new(high_water: usize) -> TcpLink {
        TcpLink { outbox: Mutex::new(Outbox::new(high_water)), writer_wake: Notify::new(), progress: Notify::new() }
    }

    pub(crate) fn is_up(&self) -> bool {
        matches!(self.outbox.lock().state(), State::Up)
    }

    /// Buffers a PUBLISH if that needs no waiting: `Ok(false)` when the buffer is over its
    /// high-water mark or the connection is down. This is the whole of a publish, usually.
    pub(crate) fn try_publish(&self, frame: &Frame) -> Result<bool, ClientError> {
        let push = self.outbox.lock().push_publish(frame)?;
        match push {
            Push::Queued { wake } => {
                self.wake_writer(wake);
                Ok(true)
            }
            Push::Full | Push::Down => Ok(false),
        }
    }

    /// Buffers a PUBLISH, waiting while the buffer is over its high-water mark, and up to
    /// `reconnect_wait` while the connection is down.
    pub(crate) async fn publish(&self, shared: &Shared, frame: &Frame) -> Result<(), ClientError> {
        let mut deadline = None;
        loop {
            let notified = self.progress.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let push = self.outbox.lock().push_publish(frame)?;
            match push {
                Push::Queued { wake } => {
                    self.wake_writer(wake);
                    return Ok(());
                }
                Push::Full => notified.await,
                Push::Down => {
                    let wait = shared.config.reconnect_wait;
                    let deadline = *deadline.get_or_insert_with(|| Instant::now() + wait);
                    if timeout_at(deadline, notified).await.is_err() {
                        return Err(ClientError::Timeout { operation: "publish (connection down)", after: wait });
                    }
                }
            }
        }
    }

    /// Numbers a guaranteed publish, keeps it in the window and, when connected, buffers it.
    /// While the connection is down it waits in the window and goes out with the others when
    /// the connection is back (see `go_up`). The caller holds a window place already.
    pub(crate) fn publish_guaranteed(
        &self,
        shared: &Shared,
        message: tidings_wire::Message,
        sink: crate::shared::AckSink,
    ) -> Result<(), ClientError> {
        let wake = {
            let mut outbox = self.outbox.lock();
            if let Some(e) = outbox.closed_error() {
                return Err(e);
            }
            let mut window = shared.publishing.lock();
            let up = matches!(outbox.state(), State::Up);
            // The broker it goes to now; one that goes later is named when it is sent (`go_up`).
            // Read only while the name has no home: most publishes skip the name's copy.
            let server = if up && !window.has_home(&shared.config.pubend) { shared.server_name() } else { None };
            let frame =
                Frame::GuaranteedPublish(window.open(&shared.config.pubend, message, sink, server.as_deref()).clone());
            up && outbox.push(&frame)?
        };
        self.wake_writer(wake);
        Ok(())
    }

    /// Subscribes: SUBSCRIBE then PING. If the connection drops before the PONG, the
    /// subscription stays registered, is re-sent by the reconnect, and is confirmed again.
    pub(crate) async fn subscribe(&self, shared: &Shared, frame: Subscribe, route: Route) -> Result<(), ClientError> {
        let id = frame.id;
        let end = route.end.clone();
        let encoded = Frame::Subscribe(frame.clone());
        let (nonce, rx) = self
            .enqueue_barrier(shared, |outbox, registry| {
                outbox.push(&encoded)?;
                registry.insert(frame, route);
                registry.mark_sent(id, shared.next_seq());
                Ok(())
            })
            .await?;
        let mut outcome = self.await_pong(shared, nonce, rx).await;
        for attempt in 1..=SUBSCRIBE_TRIES {
            // Gone from the registry: refused (possibly on a later connection), or closed.
            if !shared.registry.lock().contains(id) {
                let closed = shared.closed_error().unwrap_or(ClientError::Closed);
                return Err(end.get().cloned().unwrap_or(closed));
            }
            let error = match outcome {
                Ok(()) => return Ok(()),
                Err(error) => error,
            };
            let hopeless = matches!(error, ClientError::Timeout { .. }) || shared.closed_error().is_some();
            if hopeless || attempt == SUBSCRIBE_TRIES {
                self.forget(shared, id);
                return Err(error);
            }
            debug!(subscription = id.0, %error, "subscription will be re-sent on the next connection");
            outcome = self.barrier(shared).await;
        }
        Err(ClientError::ConnectionLost)
    }

    /// Removes a subscription and, when connected, tells the broker. Does not wait.
    pub(crate) fn forget(&self, shared: &Shared, id: SubId) {
        let wake = {
            let mut outbox = self.outbox.lock();
            let removed = shared.registry.lock().remove(id).is_some();
            removed
                && matches!(outbox.state(), State::Up)
                && outbox.push(&Frame::Unsubscribe(Unsubscribe { id })).unwrap_or(false)
        };
        self.wake_writer(wake);
    }

    /// Removes a subscription and waits until the broker has handled the UNSUBSCRIBE. A
    /// connection that is down or drops meanwhile has forgotten it anyway: that is success.
    pub(crate) async fn unsubscribe(&self, shared: &Shared, id: SubId) -> Result<(), ClientError> {
        self.forget(shared, id);
        if !self.is_up() {
            return Ok(());
        }
        match self.barrier(shared).await {
            Err(ClientError::ConnectionLost | ClientError::Closed) => Ok(()),
            other => other,
        }
    }

    /// PING and wait for the PONG: everything buffered before has been handled by the broker.
    pub(crate) async fn barrier(&self, shared: &Shared) -> Outcome {
        let (nonce, rx) = self.enqueue_barrier(shared, |_, _| Ok(())).await?;
        self.await_pong(shared, nonce, rx).await
    }

    /// Waits (up to `reconnect_wait`) for the connection to be up, then, under the lock, lets
    /// `stage` buffer its frames and appends a PING. Returns the PING's nonce and waiter.
    async fn enqueue_barrier<F>(
        &self,
        shared: &Shared,
        stage: F,
    ) -> Result<(u64, oneshot::Receiver<Outcome>), ClientError>
    where
        F: FnOnce(&mut Outbox, &mut Registry<Route>) -> Result<(), ClientError>,
    {
        let mut stage = Some(stage);
        let wait = shared.config.reconnect_wait;
        let deadline = Instant::now() + wait;
        loop {
            let notified = self.progress.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let staged = {
                let mut outbox = self.outbox.lock();
                if let Some(e) = outbox.closed_error() {
                    return Err(e);
                }
                match outbox.state() {
                    State::Up => Some(Self::stage_with_ping(shared, &mut outbox, stage.take())?),
                    _ => None,
                }
            };
            if let Some((nonce, rx, wake)) = staged {
                self.wake_writer(wake);
                return Ok((nonce, rx));
            }
            if timeout_at(deadline, notified).await.is_err() {
                return Err(ClientError::Timeout { operation: "waiting for the reconnect", after: wait });
            }
        }
    }

    #[allow(clippy::type_complexity)] // a private helper's three results
    fn stage_with_ping<F>(
        shared: &Shared,
        outbox: &mut Outbox,
        stage: Option<F>,
    ) -> Result<(u64, oneshot::Receiver<Outcome>, bool), ClientError>
    where
        F: FnOnce(&mut Outbox, &mut Registry<Route>) -> Result<(), ClientError>,
    {
        let was_empty = outbox.is_empty();
        if let Some(stage) = stage {
            stage(outbox, &mut shared.registry.lock())?;
        }
        let nonce = shared.next_seq();
        outbox.push(&Frame::Ping(Ping { nonce }))?;
        let rx = shared.waiters.lock().insert(nonce);
        Ok((nonce, rx, was_empty))
    }

    async fn await_pong(&self, shared: &Shared, nonce: u64, rx: oneshot::Receiver<Outcome>) -> Outcome {
        let limit = shared.config.request_timeout;
        match timeout(limit, rx).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(_)) => Err(shared.closed_error().unwrap_or(ClientError::ConnectionLost)),
            Err(_) => {
                shared.waiters.lock().remove(nonce);
                Err(ClientError::Timeout { operation: "waiting for PONG", after: limit })
            }
        }
    }

    /// Buffers a small frame if connected (best effort; used to answer a broker's PING).
    pub(crate) fn push_control(&self, frame: &Frame) {
        let wake = {
            let mut outbox = self.outbox.lock();
            matches!(outbox.state(), State::Up) && outbox.push(frame).unwrap_or(false)
        };
        self.wake_writer(wake);
    }

    /// Starts an orderly close: DISCONNECT after everything buffered; the writer finishes.
    /// With no connection, the client is finished at once.
    pub(crate) fn begin_close(&self, shared: &Shared) {
        let disconnect = Frame::Disconnect(Notice::new(ReasonCode::Normal, "client closed"));
        let step = self.outbox.lock().begin_close(&disconnect);
        match step {
            Some(wake) => self.wake_writer(wake),
            None => shared.finish(None),
        }
    }

    /// Called by `Shared::finish`.
    pub(crate) fn closed(&self, error: Option<ClientError>) {
        self.outbox.lock().close(error);
        self.progress.notify_waiters();
        self.writer_wake.notify_one();
    }

    /// A connection completed its handshake: re-send every subscription, each followed by a
    /// PING whose PONG confirms it (so an ERROR names exactly one unconfirmed subscription),
    /// and open the buffer to callers.
    fn go_up(&self, shared: &Shared, welcome: &Welcome) -> Result<(), ClientError> {
        shared.welcomed(welcome);
        {
            let mut outbox = self.outbox.lock();
            outbox.go_up()?;
            let mut registry = shared.registry.lock();
            registry.resend_all(|frame| {
                let seq = shared.next_seq();
                let ping = Frame::Ping(Ping { nonce: shared.next_seq() });
                if let Err(error) = outbox.push(&Frame::Subscribe(frame.clone())).and_then(|_| outbox.push(&ping)) {
                    warn!(%error, subscription = frame.id.0, "cannot re-send subscription");
                }
                seq
            });
            // Guaranteed publishes not yet acknowledged go again, in sequence order; the
            // broker answers the ones it already logged without logging them twice.
            let mut window = shared.publishing.lock();
            window.name_homes(&welcome.server_name);
            for frame in window.in_flight() {
                if let Err(error) = outbox.push(&Frame::GuaranteedPublish(frame.clone())) {
                    warn!(%error, seq = frame.seq, "cannot re-send a guaranteed publish");
                }
            }
        }
        self.writer_wake.notify_one();
        self.progress.notify_waiters();
        shared.emit(ConnectionEvent::Connected { server_name: welcome.server_name.clone() });
        Ok(())
    }

    /// The broker refused something or said DISCONNECT: the connection is as good as gone.
    /// Stop buffering into it at once, so that calls made from now on wait for the next one.
    pub(crate) fn doom(&self) {
        self.outbox.lock().doom();
    }

    /// The connection was lost. Returns `false` when the client was closing anyway.
    fn go_down(&self, shared: &Shared, error: &ClientError) -> bool {
        let (reconnect, unsent_publishes) = self.outbox.lock().go_down();
        if reconnect {
            shared.waiters.lock().fail_all(error);
            self.progress.notify_waiters();
            shared.emit(ConnectionEvent::Disconnected { error: error.clone(), unsent_publishes });
        }
        reconnect
    }

    /// The writer takes the buffered bytes; callers waiting for space are woken.
    fn take(&self, spare: &mut bytes::BytesMut) -> Take {
        let take = self.outbox.lock().take(spare);
        if take == Take::Batch {
            self.progress.notify_waiters();
        }
        take
    }

    fn wake_writer(&self, wake: bool) {
        if wake {
            self.writer_wake.notify_one();
        }
    }
}
