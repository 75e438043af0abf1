//! The TCP write buffer and the connection state it is guarded with. Pure: callers hold the
//! lock, carry out the wake-ups the methods ask for, and do the I/O.
//!
//! Publishing encodes straight into `buf`; the writer swaps the whole buffer out and writes
//! it with one call, so a burst of small messages costs one syscall, not one each.

use bytes::BytesMut;
use tidings_wire::Frame;

use crate::error::ClientError;

/// Where the connection is in its life.
#[derive(Debug, Clone)]
pub(crate) enum State {
    /// No connection; a reconnect may be under way. Nothing is buffered.
    Down,
    /// Connected and past the handshake: frames may be buffered.
    Up,
    /// DISCONNECT is buffered; the writer closes after writing it. Nothing more is accepted.
    Closing,
    /// Closed for good; `None` after an orderly close.
    Closed(Option<ClientError>),
}

/// What became of a frame offered to the buffer.
#[derive(Debug)]
pub(crate) enum Push {
    /// Buffered. `wake`: the buffer was empty, so the writer must be woken.
    Queued { wake: bool },
    /// The buffer is over its high-water mark; wait for the writer.
    Full,
    /// The connection is down; wait for the reconnect.
    Down,
}

/// What the writer found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Take {
    /// The buffered bytes were swapped into the writer's buffer.
    Batch,
    /// Nothing to write; wait to be woken.
    Empty,
    /// Everything up to DISCONNECT is written: shut the socket.
    Closing,
}

/// The write buffer. Invariant: `buf` is empty unless `state` is `Up` or `Closing`.
#[derive(Debug)]
pub(crate) struct Outbox {
    buf: BytesMut,
    state: State,
    high_water: usize,
    /// PUBLISH frames in `buf`: what a dropped connection certainly did not send.
    publishes: u64,
}

impl Outbox {
    pub(crate) fn new(high_water: usize) -> Outbox {
        Outbox { buf: BytesMut::new(), state: State::Down, high_water, publishes: 0 }
    }

    pub(crate) fn state(&self) -> &State {
        &self.state
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The error for a caller when the client is closing or closed.
    pub(crate) fn closed_error(&self) -> Option<ClientError> {
        match &self.state {
            State::Down | State::Up => None,
            State::Closing | State::Closed(None) => Some(ClientError::Closed),
            State::Closed(Some(e)) => Some(e.clone()),
        }
    }

    /// Offers a PUBLISH: buffered only while up and under the high-water mark.
    pub(crate) fn push_publish(&mut self, frame: &Frame) -> Result<Push, ClientError> {
        if let Some(e) = self.closed_error() {
            return Err(e);
        }
        match self.state {
            State::Up if self.buf.len() < self.high_water => {
                let wake = self.push(frame)?;
                self.publishes += 1;
                Ok(Push::Queued { wake })
            }
            State::Up => Ok(Push::Full),
            _ => Ok(Push::Down),
        }
    }

    /// Appends a frame regardless of the high-water mark (control frames are small and must
    /// not queue behind data). The caller checked the state is `Up`. Returns whether the
    /// writer must be woken; on an encoding error the buffer is unchanged.
    pub(crate) fn push(&mut self, frame: &Frame) -> Result<bool, ClientError> {
        let wake = self.buf.is_empty();
        frame.encode(&mut self.buf)?;
        Ok(wake)
    }

    /// The writer takes everything buffered, leaving its (empty) `spare` in its place.
    pub(crate) fn take(&mut self, spare: &mut BytesMut) -> Take {
        if !self.buf.is_empty() {
            std::mem::swap(&mut self.buf, spare);
            self.publishes = 0;
            Take::Batch
        } else if matches!(self.state, State::Closing) {
            Take::Closing
        } else {
            Take::Empty
        }
    }

    /// The connection was lost: drops what was not written. Returns `false` when the client
    /// was closing (or closed) anyway, so it should not reconnect.
    /// The connection dropped: what was buffered is discarded. Returns whether to reconnect,
    /// and how many PUBLISH frames were discarded unsent.
    pub(crate) fn go_down(&mut self) -> (bool, u64) {
        self.buf.clear();
        let unsent = std::mem::take(&mut self.publishes);
        let reconnect = match self.state {
            State::Up | State::Down => {
                self.state = State::Down;
                true
            }
            State::Closing | State::Closed(_) => false,
        };
        (reconnect, unsent)
    }

    /// The connection is about to end: drop what was not written and accept nothing more
    /// until the next connection (a no-op unless up).
    pub(crate) fn doom(&mut self) {
        if matches!(self.state, State::Up) {
            self.buf.clear();
            self.state = State::Down;
        }
        // `go_down` follows and reports them; a doomed buffer's publishes are unsent too.
    }

    /// A connection completed its handshake; the caller buffers the re-sent subscriptions.
    pub(crate) fn go_up(&mut self) -> Result<(), ClientError> {
        match self.state {
            State::Down => {
                self.state = State::Up;
                Ok(())
            }
            _ => Err(self.closed_error().unwrap_or(ClientError::Closed)),
        }
    }

    /// Starts an orderly close: buffers `disconnect` after everything else. Returns
    /// `Some(wake)` when the writer will finish the close, `None` when there is no connection
    /// to close (the caller finishes the client itself).
    pub(crate) fn begin_close(&mut self, disconnect: &Frame) -> Option<bool> {
        match self.state {
            State::Up => {
                let wake = self.push(disconnect).unwrap_or(false);
                self.state = State::Closing;
                Some(wake)
            }
            State::Closing => Some(false),
            State::Down | State::Closed(_) => None,
        }
    }

    /// Closed for good.
    pub(crate) fn close(&mut self, error: Option<ClientError>) {
        self.buf.clear();
        self.state = State::Closed(error);
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use tidings_wire::{Message, Notice, Ping, ReasonCode, DEFAULT_MAX_FRAME};

    use super::*;

    fn publish(payload: &'static [u8]) -> Frame {
        Frame::Publish(Message::new("a.b", &[], Bytes::from_static(payload), 1).unwrap())
    }

    fn up(high_water: usize) -> Outbox {
        let mut o = Outbox::new(high_water);
        o.go_up().unwrap();
        o
    }

    fn frames(mut bytes: BytesMut) -> Vec<Frame> {
        std::iter::from_fn(|| Frame::decode(&mut bytes, DEFAULT_MAX_FRAME).unwrap()).collect()
    }

    #[test]
    fn publishes_are_encoded_back_to_back_and_only_the_first_wakes_the_writer() {
        let mut o = up(1 << 20);
        assert!(matches!(o.push_publish(&publish(b"1")), Ok(Push::Queued { wake: true })));
        assert!(matches!(o.push_publish(&publish(b"2")), Ok(Push::Queued { wake: false })));
        let mut spare = BytesMut::new();
        assert_eq!(o.take(&mut spare), Take::Batch);
        assert_eq!(frames(spare), [publish(b"1"), publish(b"2")]);
        assert_eq!(o.take(&mut BytesMut::new()), Take::Empty);
        assert!(matches!(o.push_publish(&publish(b"3")), Ok(Push::Queued { wake: true })));
    }

    #[test]
    fn publish_waits_once_the_buffer_is_over_the_high_water_mark() {
        let mut o = up(10);
        assert!(matches!(o.push_publish(&publish(b"0123456789")), Ok(Push::Queued { .. })));
        assert!(matches!(o.push_publish(&publish(b"x")), Ok(Push::Full)));
        o.push(&Frame::Ping(Ping { nonce: 1 })).unwrap();
        o.take(&mut BytesMut::new());
        assert!(matches!(o.push_publish(&publish(b"x")), Ok(Push::Queued { .. })));
    }

    #[test]
    fn nothing_is_buffered_while_down_and_losing_the_connection_drops_the_buffer() {
        let mut o = Outbox::new(1 << 20);
        assert!(matches!(o.push_publish(&publish(b"x")), Ok(Push::Down)));
        o.go_up().unwrap();
        o.push_publish(&publish(b"x")).unwrap();
        o.push_publish(&publish(b"y")).unwrap();
        assert_eq!(o.go_down(), (true, 2), "two publishes discarded unsent");
        assert_eq!(o.take(&mut BytesMut::new()), Take::Empty);
        o.go_up().unwrap();
        o.push_publish(&publish(b"z")).unwrap();
        o.take(&mut BytesMut::new());
        assert_eq!(o.go_down(), (true, 0), "a taken batch is no longer counted as unsent");
    }

    #[test]
    fn a_doomed_connection_takes_nothing_more_but_still_reconnects() {
        let mut o = up(1 << 20);
        o.push_publish(&publish(b"x")).unwrap();
        o.doom();
        assert!(matches!(o.push_publish(&publish(b"y")), Ok(Push::Down)));
        assert_eq!(o.take(&mut BytesMut::new()), Take::Empty);
        assert_eq!(o.go_down(), (true, 1), "the doomed buffer's publish is reported unsent");
        o.go_up().unwrap();
    }

    #[test]
    fn close_writes_disconnect_last_then_closes() {
        let mut o = up(1 << 20);
        o.push_publish(&publish(b"x")).unwrap();
        let bye = Frame::Disconnect(Notice::new(ReasonCode::Normal, "bye"));
        assert_eq!(o.begin_close(&bye), Some(false));
        assert!(matches!(o.push_publish(&publish(b"y")), Err(ClientError::Closed)));
        let mut spare = BytesMut::new();
        assert_eq!(o.take(&mut spare), Take::Batch);
        assert_eq!(frames(spare), [publish(b"x"), bye]);
        assert_eq!(o.take(&mut BytesMut::new()), Take::Closing);
        assert!(!o.go_down().0, "a lost connection while closing does not reconnect");
    }

    #[test]
    fn closing_while_down_is_left_to_the_caller_and_closed_reports_its_cause() {
        let mut o = Outbox::new(1);
        assert_eq!(o.begin_close(&Frame::Ping(Ping { nonce: 1 })), None);
        o.close(Some(ClientError::ConnectionLost));
        assert!(matches!(o.push_publish(&publish(b"x")), Err(ClientError::ConnectionLost)));
        assert!(o.go_up().is_err());
    }
}
