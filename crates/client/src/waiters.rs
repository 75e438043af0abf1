//! Callers waiting for a PONG, by the nonce of their PING.

use std::collections::HashMap;

use tokio::sync::oneshot;

use crate::error::ClientError;

/// What a waiter learns: `Ok` when its PONG arrived.
pub(crate) type Outcome = Result<(), ClientError>;

/// Pending PINGs. A waiter whose receiver was dropped (its caller gave up) is removed when its
/// PONG arrives or the connection fails, whichever comes first.
#[derive(Debug, Default)]
pub(crate) struct Waiters {
    pending: HashMap<u64, oneshot::Sender<Outcome>>,
}

impl Waiters {
    /// Registers a waiter for the PONG carrying `nonce`.
    pub(crate) fn insert(&mut self, nonce: u64) -> oneshot::Receiver<Outcome> {
        let (tx, rx) = oneshot::channel();
        self.pending.insert(nonce, tx);
        rx
    }

    /// Forgets a waiter that gave up.
    pub(crate) fn remove(&mut self, nonce: u64) {
        self.pending.remove(&nonce);
    }

    /// The PONG for `nonce` arrived.
    pub(crate) fn resolve(&mut self, nonce: u64) {
        if let Some(tx) = self.pending.remove(&nonce) {
            let _ = tx.send(Ok(()));
        }
    }

    /// No PONG will come for any pending PING.
    pub(crate) fn fail_all(&mut self, error: &ClientError) {
        for (_, tx) in self.pending.drain() {
            let _ = tx.send(Err(error.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pong_resolves_only_its_own_waiter() {
        let mut w = Waiters::default();
        let mut a = w.insert(1);
        let mut b = w.insert(2);
        w.resolve(2);
        assert!(a.try_recv().is_err());
        assert!(matches!(b.try_recv(), Ok(Ok(()))));
        w.fail_all(&ClientError::ConnectionLost);
        assert!(matches!(a.try_recv(), Ok(Err(ClientError::ConnectionLost))));
    }
}
