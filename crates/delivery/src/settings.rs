//! Timer and size settings of the delivery core (gd-protocol §7.1). Durations are milliseconds
//! of the shell's clock; the tick unit is set by `ticks_per_ms`.

/// Every tunable of the core. [`Settings::default`] follows gd-protocol's proposals;
/// [`Settings::seed_experiment`] the values of seed 001's failure-injection runs.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Settings {
    /// Ticks per millisecond of the publishing broker's clock (1000: microsecond ticks).
    pub ticks_per_ms: u64,
    /// GCT: how long a gap may exist before its Q ticks are nacked.
    pub gap_curiosity_ms: u64,
    /// NRT before any round trip was measured.
    pub nack_repetition_initial_ms: u64,
    /// NRT floor; also how long an upstream nack absorbs repeats (consolidation window).
    pub nack_repetition_min_ms: u64,
    /// NRT cap, backoff included; also how long a silent upstream sender still gets our nacks
    /// alone, and how long after a cell's ack moved a nack below it means the cell restarted.
    pub nack_repetition_max_ms: u64,
    /// AET: unacknowledged sent ticks this old trigger an AckExpected.
    pub ack_expected_ms: u64,
    /// AckExpected backoff cap.
    pub ack_expected_max_ms: u64,
    /// DCT: nack Q ticks older than this behind the estimated pubend clock; `None` = infinite.
    pub delay_curiosity_ms: Option<u64>,
    /// FPT: an ostream with untold silence tells it after this long without telling anything.
    pub silence_ms: u64,
    /// APT: at most one Ack per this interval when only the ack prefix moved.
    pub ack_propagation_ms: u64,
    /// RPT: at most one release report per this interval.
    pub release_propagation_ms: u64,
    /// RFT: an ostream forgets an unanswered curiosity mark after this long.
    pub requested_forgetting_ms: u64,
    /// The pubend raises its durable tick lease this far ahead of its clock.
    pub lease_chunk_ms: u64,
    /// Bytes of cached payloads one stream keeps at most (see [`crate::cache`]).
    pub payload_cache_bytes: usize,
    /// A single nack covers at most this many ticks per range (a backlog is pulled as a window).
    pub max_nack_span_ticks: u64,
    /// A subend catching up (a durable subscriber back after an absence, or one whose outbox
    /// was full) fetches payloads missing from the cache at most this many messages at a time:
    /// a backlog is pulled through the log or upstream as a window, never as one huge read.
    pub catch_up_window: u64,
    /// A subend catching up is replayed at most this many messages per input; the rest goes on
    /// at the stream's next timer, due at once. Small enough that live traffic waits for at
    /// most one turn (a few hundred microseconds), large enough to amortise the turn. A live
    /// guaranteed message waits for a turn twice (its publish, its log's completion): with
    /// turns of 1,024 the live median beside a 1 M-message catch-up was 2.2-2.6 ms (1.1 alone),
    /// with 128 1.4-1.8 ms (one run 2.3), for a catch-up about 5 % slower (median of ten runs
    /// 600 k against 624 k msg/s of seven; `tidings bench catch-up`, 2 cores, 2026-11-28). The
    /// live p99 stayed where it was (8-16 ms either way): its tail is not the turn.
    pub catch_up_turn: u64,
    /// At most this many messages per second replayed to the catch-ups of one stream at this
    /// broker (0: no limit). A replay as fast as the broker can go takes every core the
    /// machine has (the broker's, and the catching-up client's), and live traffic then waits
    /// for a core; a bound leaves some.
    pub catch_up_rate: u64,
    /// Durable subends catching up on a stream whose log is here are served by the shell
    /// outside the engine's turns, by serve orders ([`crate::Action::Serve`]), instead of
    /// replayed a turn at a time: live traffic then never waits for a replay turn. Off, every
    /// catch-up is replayed by the engine (the simulator, and shells without a cursor).
    pub serve_orders: bool,
    /// A serve order covers at most this many D ticks: the engine moves the subend's pointer
    /// (and so the acknowledgements it pins) at least once per order.
    pub serve_order_messages: u64,
    /// How long a downstream cell that left a stream's tree (a route change, a partition, a
    /// restart of the pubend's broker) still holds the acknowledgements and the log's release
    /// where it last acknowledged; `None`: until it comes back (the log stays pinned).
    pub departed_retention_ms: Option<u64>,
    /// Acknowledgements upstream wait for the ack lease ([`crate::StoreAction::AckLease`]):
    /// on in a shell that stores the leases (the broker, the simulator), off where nothing
    /// would answer them (tests of the core alone).
    pub ack_leases: bool,
    /// Deliberate breakages for the simulator's mutation tests; all off by default.
    #[doc(hidden)]
    pub mutations: Mutations,
}

/// Deliberate breakages of the core, each checked at the one place it breaks, so the
/// simulator can show that its checks catch them. All off by default; never set in production.
#[doc(hidden)]
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Mutations {
    /// Send every nack upstream, even for ticks already asked within the window.
    pub skip_nack_consolidation: bool,
    /// Acknowledge upstream once any one ostream (or subend) acknowledged (max, not min).
    pub ack_before_every_ostream: bool,
    /// Treat an append as durable (and send it) as soon as it is issued.
    pub forward_before_store: bool,
    /// The pubend claims F up to its clock, over ticks whose appends are still pending.
    pub claim_f_for_q: bool,
    /// After a restart the pubend ignores its durable tick lease.
    pub no_lease_after_crash: bool,
    /// Subends deliver D ticks beyond the doubt horizon (up to the highest known tick).
    pub deliver_past_horizon: bool,
    /// Durable subends are acknowledged by what reached their outbox, not by their checkpoint
    /// (a crash of their broker then loses what the application had not acknowledged).
    pub ack_durable_by_delivery: bool,
    /// F is taken whatever tree it was judged under, and a tree move at a relay leaves the F
    /// it holds as answers (both halves of the tree rule, `TreeTag`).
    pub take_f_from_any_tree: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            ticks_per_ms: 1000,
            gap_curiosity_ms: 100,
            nack_repetition_initial_ms: 200,
            nack_repetition_min_ms: 50,
            // gd-protocol proposes 30 s. A nack that goes unanswered that long is one whose
            // way upstream broke somewhere this broker cannot see (a relay's own upstream link),
            // and after that link heals the subscribers behind waited out the backoff: up to
            // 30 s after the network was whole (issue 38's nemesis). 2 s bounds that wait, and a
            // repetition every 2 s per stream is no load; it is also what the simulator's census
            // and the delivery network tests have always run with.
            nack_repetition_max_ms: 2_000,
            ack_expected_ms: 1000,
            ack_expected_max_ms: 30_000,
            delay_curiosity_ms: Some(1000),
            silence_ms: 250,
            ack_propagation_ms: 100,
            release_propagation_ms: 500,
            requested_forgetting_ms: 1000,
            lease_chunk_ms: 2000,
            payload_cache_bytes: 64 << 20,
            max_nack_span_ticks: 600_000,
            catch_up_window: 4096,
            catch_up_turn: 128,
            catch_up_rate: 0,
            serve_orders: false,
            serve_order_messages: 16_384,
            departed_retention_ms: Some(300_000),
            ack_leases: false,
            mutations: Mutations::default(),
        }
    }
}

impl Settings {
    /// Seed 001 §4.2: GCT 200 ms, NRT 600 ms, AET 10 s, DCT infinite.
    pub fn seed_experiment() -> Self {
        Self {
            gap_curiosity_ms: 200,
            nack_repetition_initial_ms: 600,
            nack_repetition_min_ms: 600,
            ack_expected_ms: 10_000,
            delay_curiosity_ms: None,
            requested_forgetting_ms: 1200,
            ..Self::default()
        }
    }

    /// `ms` milliseconds as ticks.
    pub fn ticks(&self, ms: u64) -> u64 {
        ms.saturating_mul(self.ticks_per_ms)
    }
}
