//! Size limits on what a peer may make this broker hold. A peer that exceeds one is confused or
//! hostile; its link is closed with [`crate::CloseReason::LimitExceeded`] and what it sent is
//! dropped, so one peer cannot exhaust a broker's memory through routing.

/// Adverts in one `Adverts` message (a whole database on link-up counts as one message).
pub const MAX_ADVERTS_PER_MESSAGE: usize = 4096;

/// Links listed in one advert.
pub const MAX_LINKS_PER_ADVERT: usize = 1024;

/// Hosted pubends listed in one advert (a broker hosting more advertises the first ones only).
pub const MAX_PUBENDS_PER_ADVERT: usize = 1024;

/// Origins held in the link-state database, our own included.
pub const MAX_ORIGINS: usize = 4096;

/// Filters added or removed in one `Summary` message.
pub const MAX_FILTERS_PER_MESSAGE: usize = 65_536;

/// Filters added or removed in one `Summary` message this router sends: a summary of
/// 100,000 filters (a link coming up beside a broker with that many subscriptions) went out
/// as one message, past [`MAX_FILTERS_PER_MESSAGE`], so the peer refused it and the link never
/// stayed up; and the receiving shell applied it under one hold of its router's lock, where
/// slices of this size let its other work in between.
pub const SUMMARY_SLICE: usize = 1024;

/// Filters one peer's summary may hold over all its scopes.
pub const MAX_FILTERS_PER_LINK: usize = 1_000_000;

/// Scopes named in one `Summary` or `Synced` message (one per tree at most, plus `Local`).
pub const MAX_SCOPES_PER_MESSAGE: usize = 4097;

/// How long an advert of another origin is held without being renewed, in heartbeat
/// intervals; origins renew theirs every quarter of it.
pub const ADVERT_MAX_AGE_HEARTBEATS: u64 = 200;
