//! Content selectors (placeholder until the selector language lands).
//!
//! The type exists now so that [`crate::SubscriptionIndex::insert`] has its final signature and
//! the broker can compile against it; no value of it can be built yet.

use std::convert::Infallible;

use thiserror::Error;

/// A parsed content selector over a message's properties. Not constructible yet: [`parse`]
/// always fails, so an index holds only subscriptions without selectors for now.
///
/// [`parse`]: Selector::parse
#[derive(Debug, Clone, PartialEq)]
pub struct Selector {
    /// Uninhabited, so code paths that need a selector are statically unreachable.
    never: Infallible,
}

impl Selector {
    /// Parses selector text; for now always reports [`SelectorError::Unsupported`].
    pub fn parse(text: &str) -> Result<Selector, SelectorError> {
        let _ = text;
        Err(SelectorError::Unsupported)
    }

    /// Proves to the compiler that no selector exists yet.
    pub(crate) fn absurd(&self) -> ! {
        match self.never {}
    }
}

/// Why a selector was rejected.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SelectorError {
    /// The selector language is not implemented yet.
    #[error("content selectors are not supported yet")]
    Unsupported,
}
