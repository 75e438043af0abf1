//! Matching for tidings: which subscriptions want a published message.
//!
//! This crate is a pure core: no I/O, no async, no clock, no threads, no randomness; it must never
//! depend on tokio or any I/O crate (the broker's shell feeds it). It holds:
//!
//! - [`topic`]: validated [`Topic`]s and [`Pattern`]s (`*` is one level, `>` the rest).
//! - [`selector`]: content selectors over a message's typed properties.
//! - [`index`]: the [`SubscriptionIndex`], a trie of topic levels with a result cache per topic,
//!   then per pattern a content index of equality and range predicates (private module `content`).
//! - [`covering`]: whether one filter (pattern and selector) accepts all that another does.
//! - [`filter_set`]: a [`FilterSet`] that answers "does any filter accept this message?" without
//!   mutating (the route core's per-link summary test).
//!
//! Start reading at [`SubscriptionIndex::matches`], the hot path of every publish; then
//! `content/mod.rs` for how selectors are found without evaluating them all. The selector
//! language is specified in `docs/selectors.md`; why its parser is hand-written is in the
//! [`selector`] module doc. For the CLI, [`SelectorError::render`] prints an error with a caret
//! under the spot.

pub mod covering;
pub mod filter_set;
pub mod index;
pub mod selector;
pub mod topic;

mod cache;
mod content;
mod stats;
mod trie;

pub use covering::{covers, Filter};
pub use filter_set::FilterSet;
pub use index::{MatchScratch, SubscriptionId, SubscriptionIndex, DEFAULT_CACHE_CAPACITY};
pub use selector::{Selector, SelectorError, Span, Truth, MAX_SELECTOR_BYTES, MAX_SELECTOR_DEPTH};
pub use stats::MatchStats;
pub use topic::{Pattern, PatternLevel, Topic, TopicError, MAX_TOPIC_BYTES, MAX_TOPIC_LEVELS};
