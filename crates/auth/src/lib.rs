//! Who a client is and what it may touch (issue 43).
//!
//! Pure: no sockets, no runtime. The broker loads a [`Users`] file, authenticates a session's
//! [`Credentials`] once (off its event loop, within a [`VerifyBudget`]), and then asks the
//! user's [`Permissions`] on every publish and subscribe, and on each delivery for
//! subscriptions whose wildcard overlaps a denied topic. Deny always wins; with a users file in
//! force, what no allow rule names is denied.

mod budget;
mod certificate;
mod flood;
mod password;
mod permissions;
mod rules;
mod scram;
mod users;

pub use budget::VerifyBudget;
pub use certificate::certificate_names;
pub use flood::{FloodWatch, FLOOD_FAILURES_PER_SECOND};
pub use password::{hash_password, is_known_hash, verify_password};
pub use permissions::{Permissions, Rules, SubscribeDecision};
pub use rules::{overlap, RuleSet};
pub use scram::{rfc7677, ClientFirst, ScramCredential, ScramError, ScramExchange, DEFAULT_ITERATIONS, SCRAM_SHA_256};
pub use users::{token_digest, token_entry, Credentials, Failure, Role, User, Users};

/// A users file that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// The file did not read, parse or check; the text says where.
    #[error("users file: {0}")]
    File(String),
}
