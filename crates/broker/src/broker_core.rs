//! The broker core every client protocol's sessions call: subscribe, publish, acknowledge,
//! durable subscriptions. It puts the local subscription table ([`Dispatcher`]), the links
//! ([`Cluster`]) and guaranteed delivery ([`Guaranteed`]) behind one API, in the order they
//! must be told (a guaranteed filter goes into the summaries before the driver's barrier
//! vouches for it; a leaving session's subscriptions go a slice at a time). The native session
//! ([`crate::session`]) is one caller; a second protocol (MQTT) is the next, and calls the same
//! methods rather than the native session or the pieces behind it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tidings_delivery::SubendId;
use tidings_matching::{Pattern, Selector, SubscriptionId};
use tidings_route::{Arrival, PubendId};
use tidings_wire::{check_group_name, GuaranteedPublish, Message, Notice, ReasonCode, SubId, Tick};

use crate::cluster::{Cluster, RouteFilter, RouteScratch};
use crate::dispatch::{DispatchScratch, Dispatcher, BULK_SLICE};
use crate::guaranteed::durable::DurableSpec;
use crate::guaranteed::Guaranteed;
use crate::metrics::Metrics;
use crate::outbox::{Outbox, Target};
use crate::queue_groups::QueueGroup;
use crate::reserved;

/// A match this long makes a publisher's next publishes match off the worker (see
/// [`BrokerCore::publish`]): far above a normal match (microseconds), far below a stall anyone
/// notices.
const COSTLY_MATCH: Duration = Duration::from_millis(2);

/// How many publishes after a costly match still match off the worker.
const COSTLY_STREAK: u32 = 1_000;

/// Whether this thread is a worker of a multi-threaded runtime (where `block_in_place` works).
fn on_worker_pool() -> bool {
    tokio::runtime::Handle::try_current()
        .is_ok_and(|handle| handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
}

/// The handles of the broker's cores, shared by every session.
pub struct BrokerCore {
    /// The local subscription table.
    pub dispatcher: Arc<Dispatcher>,
    /// Links to other brokers and the router.
    pub cluster: Arc<Cluster>,
    /// Guaranteed delivery: the handle on its driver task.
    pub guaranteed: Guaranteed,
    /// `[limits] max_match_time` (zero: none).
    max_match_time: Duration,
    /// Counts requests and what they found.
    metrics: Metrics,
}

/// What became of a publish the core accepted, for the session to tell its client in its own
/// protocol (the native one answers NO_RESPONDERS; MQTT 5 would answer its own way).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// Delivered here and routed where interest is (possibly nowhere: best effort).
    Routed,
    /// A request that nothing anywhere matched: no local subscription, and no neighbour's
    /// routing summary. Its requester should hear so now, not after its timeout.
    NoResponders,
}

/// One publisher's reusable state: scratch space, so a publish allocates nothing, and the
/// publishing endpoint its messages carry between brokers.
#[derive(Default)]
pub struct Publisher {
    /// Local delivery's scratch; its congested queues are the publisher's to wait for.
    pub dispatch: DispatchScratch,
    /// Routing's scratch; its congested links likewise.
    pub route: RouteScratch,
    /// This publisher's endpoint, chosen at its first publish while links are up.
    pubend: Option<PubendId>,
    /// Publishes left to match off the runtime's worker.
    costly_left: u32,
}

impl Publisher {
    /// Whether its publishes congested a queue or a link the publisher should hold back for.
    pub fn congested(&self) -> bool {
        !self.dispatch.congested.is_empty() || !self.route.congested.is_empty()
    }
}

/// Routing filters of a session's best-effort subscriptions not yet given to the router: a
/// client subscribing thousands of patterns in one read costs the router one settle (and each
/// peer one summary delta) per [`BULK_SLICE`], not one per pattern (a neighbour waited 0.3 s
/// behind 100,000). The session gives them ([`BrokerCore::route_pending`]) before any other
/// work of its own, at the end of each batch of frames, and on leaving.
#[derive(Default)]
pub struct PendingRoutes(Vec<RouteFilter>);

/// A best-effort subscription, as the core holds it.
pub struct BestEffort {
    index_id: SubscriptionId,
    /// What the router was told, when this broker has a cluster.
    route: Option<RouteFilter>,
    /// The queue group it is a member of.
    group: Option<Arc<QueueGroup>>,
}

/// A guaranteed (or durable) subscription, as the core holds it.
pub struct GuaranteedSub {
    subend: SubendId,
    /// What the router was told (the driver keeps a durable one's).
    route: Option<RouteFilter>,
    /// A durable subscription's name.
    durable: Option<String>,
}

impl BrokerCore {
    /// The core over these handles, refusing publishes whose matching took longer than
    /// `max_match_time` (zero: none).
    pub fn new(
        dispatcher: Arc<Dispatcher>,
        cluster: Arc<Cluster>,
        guaranteed: Guaranteed,
        max_match_time: Duration,
        metrics: Metrics,
    ) -> BrokerCore {
        BrokerCore { dispatcher, cluster, guaranteed, max_match_time, metrics }
    }

    /// A best-effort publish: delivered to local subscribers, then routed to the links. A
    /// message whose matching took past `[limits] max_match_time` is refused (and not routed),
    /// and so is one whose reserved properties are invalid (a reply subject that is not a
    /// topic: refused before anything is delivered). A request (one with a reply subject) that
    /// reached nobody is answered [`Reach::NoResponders`].
    pub fn publish(&self, message: &Message, publisher: &mut Publisher) -> Result<Reach, Notice> {
        let asks = reserved::check(message)?;
        if asks.retain {
            self.dispatcher.check_retained(message)?;
        }
        let spent = if publisher.costly_left > 0 && on_worker_pool() {
            // Matching this publisher's messages has been costly: do it with the worker's other
            // duties handed to another thread, so sockets are still polled meanwhile. A task
            // that computes for long on a worker stops the runtime's I/O until it yields (a
            // light client's round trip took as long as a burst of costly matches).
            tokio::task::block_in_place(|| self.dispatcher.publish(message, &mut publisher.dispatch))
        } else {
            self.dispatcher.publish(message, &mut publisher.dispatch)
        };
        publisher.costly_left = match spent {
            Some(spent) if spent >= COSTLY_MATCH => COSTLY_STREAK,
            _ => publisher.costly_left.saturating_sub(1),
        };
        let bound = self.max_match_time;
        if let Some(spent) = spent.filter(|spent| !bound.is_zero() && *spent > bound) {
            let text = format!(
                "matching this message took {} ms, past the broker's [limits] max_match_time of {} ms",
                spent.as_millis(),
                bound.as_millis()
            );
            return Err(Notice::new(tidings_wire::ReasonCode::LimitExceeded, text));
        }
        let mut routed = false;
        if self.cluster.is_active() {
            let pubend = *publisher.pubend.get_or_insert_with(|| self.cluster.new_pubend());
            let served = &publisher.dispatch.served;
            self.cluster.forward(Arrival::Published { pubend }, message, served, &mut publisher.route);
            routed = publisher.route.sent_any();
        }
        if !publisher.dispatch.unserved.is_empty() {
            let route = &publisher.route;
            let active = self.cluster.is_active();
            self.dispatcher.serve_leftover(
                message,
                |group| active && route.routed_group(group),
                &mut publisher.dispatch,
            );
        }
        if asks.reply_to.is_some() {
            self.metrics.requests.inc();
            if publisher.dispatch.matched == 0 && !routed {
                self.metrics.no_responders.inc();
                return Ok(Reach::NoResponders);
            }
        }
        Ok(Reach::Routed)
    }

    /// Ends a batch of publishes read together (see [`Dispatcher::finish_batch`]).
    pub fn finish_batch(&self, read_at: Instant, publisher: &mut Publisher) {
        self.dispatcher.finish_batch(read_at, &mut publisher.dispatch);
    }

    /// A best-effort subscription delivering to `target`, here and (through the router) from
    /// other brokers.
    pub fn subscribe(
        &self,
        pattern: Pattern,
        selector: Option<Selector>,
        target: Arc<Target>,
        pending: &mut PendingRoutes,
    ) -> BestEffort {
        let group = target.group.clone();
        let route = self.cluster.is_enabled().then(|| {
            let name = group.as_ref().map(|group| group.name.clone());
            RouteFilter::grouped(pattern.clone(), selector.clone(), name)
        });
        let index_id = self.dispatcher.subscribe(pattern, selector, target);
        if let Some(filter) = &route {
            pending.0.push(filter.clone());
            if pending.0.len() >= BULK_SLICE {
                self.route_pending(pending);
            }
        }
        BestEffort { index_id, route, group }
    }

    /// A best-effort member of the queue group `group` (a name [`check_group_name`] accepts),
    /// delivering to `outbox` as subscription `id`: each matching message goes to one member
    /// of the group network-wide. Its broker advertises one routing entry per (group,
    /// filter), however many members share it.
    /// With `key` (a property name), messages with the same value of it go to the same member
    /// here while it lives and keeps up (`crate::queue_groups`).
    pub fn subscribe_member(
        &self,
        (group, key): (&str, Option<&str>),
        (id, outbox): (SubId, Arc<Outbox>),
        (pattern, selector): (Pattern, Option<Selector>),
        pending: &mut PendingRoutes,
    ) -> Result<BestEffort, Notice> {
        check_group_name(group).map_err(|why| Notice::new(ReasonCode::InvalidQueueGroup, why))?;
        if let Some(key) = key {
            check_queue_key(key)?;
        }
        let joined = self.dispatcher.groups.join(group, key);
        let joined = joined.map_err(|why| Notice::new(ReasonCode::InvalidQueueGroup, why))?;
        let target = Arc::new(Target::member(id, outbox, joined));
        Ok(self.subscribe(pattern, selector, target, pending))
    }

    /// Gives the router the routing filters of the subscriptions taken since the last time.
    pub fn route_pending(&self, pending: &mut PendingRoutes) {
        if !pending.0.is_empty() {
            self.cluster.subscribe_many(std::mem::take(&mut pending.0));
        }
    }

    /// Ends one best-effort subscription.
    pub fn unsubscribe(&self, subscription: BestEffort) {
        self.dispatcher.unsubscribe(subscription.index_id);
        if let Some(group) = &subscription.group {
            self.dispatcher.groups.leave(group);
        }
        if let Some(filter) = subscription.route {
            self.cluster.unsubscribe(filter);
        }
    }

    /// Ends every best-effort subscription of a leaving session. Many (a million took 3.1 s)
    /// leave off the runtime's workers, in slices, so no other client waits for them.
    pub fn unsubscribe_all(self: &Arc<Self>, leaving: Vec<BestEffort>) {
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) if leaving.len() > BULK_SLICE => {
                let core = Arc::clone(self);
                drop(runtime.spawn_blocking(move || core.unsubscribe_sliced(leaving)));
            }
            _ => self.unsubscribe_sliced(leaving),
        }
    }

    /// Removes subscriptions from the index and then the router, a slice at a time (see
    /// [`Dispatcher::unsubscribe_many`]).
    fn unsubscribe_sliced(&self, leaving: Vec<BestEffort>) {
        let mut leaving = leaving.into_iter().peekable();
        while leaving.peek().is_some() {
            let (ids, routes): (Vec<SubscriptionId>, Vec<Option<RouteFilter>>) = leaving
                .by_ref()
                .take(BULK_SLICE)
                .map(|s| {
                    if let Some(group) = &s.group {
                        self.dispatcher.groups.leave(group);
                    }
                    (s.index_id, s.route)
                })
                .unzip();
            self.dispatcher.unsubscribe_many(&ids);
            self.cluster.unsubscribe_many(routes.into_iter().flatten().collect());
        }
    }

    /// A guaranteed SUBSCRIBE: confirmed with SUBSCRIBED on `outbox`.
    pub fn subscribe_guaranteed(
        &self,
        id: SubId,
        (pattern, selector): (Pattern, Option<Selector>),
        outbox: Arc<Outbox>,
    ) -> GuaranteedSub {
        let route = self.route_filter(&pattern, &selector);
        // Into the summaries first: the driver's barrier then vouches for this filter.
        if let Some(filter) = &route {
            self.cluster.subscribe(filter.clone());
        }
        let subend = self.guaranteed.subscribe(id, pattern, selector, outbox);
        GuaranteedSub { subend, route, durable: None }
    }

    /// A durable SUBSCRIBE: refused if another session holds the name or it stands for another
    /// filter. The driver keeps a durable subscription's filter in the summaries, across
    /// sessions.
    pub fn subscribe_durable(
        &self,
        id: SubId,
        spec: DurableSpec,
        filter: (Pattern, Option<Selector>),
        outbox: Arc<Outbox>,
    ) -> Result<GuaranteedSub, Notice> {
        let name = spec.name.clone();
        let subend = self.guaranteed.subscribe_durable(id, spec, filter, outbox)?;
        Ok(GuaranteedSub { subend, route: None, durable: Some(name) })
    }

    /// A guaranteed queue group member (`sub --queue G --guaranteed`). On a broker with links
    /// every group is kept at the network's `[cluster] queue_home`: a member there or on a
    /// broker without links joins the group here; a member elsewhere is a remote member of the
    /// group at the home (`guaranteed::group_links`), and a broker with links and no home
    /// configured refuses it. Refused too when the group exists for another filter. Its end
    /// (UNSUBSCRIBE or a closed session) gives its unacknowledged messages to the other
    /// members; the group itself stays.
    pub fn subscribe_member_guaranteed(
        &self,
        id: SubId,
        group: &str,
        texts: (String, Option<String>, Option<String>),
        filter: (Pattern, Option<Selector>),
        outbox: Arc<Outbox>,
    ) -> Result<GuaranteedSub, Notice> {
        if let Some(key) = &texts.2 {
            check_queue_key(key)?;
        }
        if self.cluster.is_enabled() {
            let Some(home) = self.cluster.queue_home() else {
                let why = "guaranteed queue groups on a broker with links need the network's \
                           [cluster] queue_home: the broker that keeps them";
                return Err(Notice::new(ReasonCode::UnsupportedDeliveryMode, why));
            };
            if home != self.cluster.name() {
                check_group_name(group).map_err(|why| Notice::new(ReasonCode::InvalidQueueGroup, why))?;
                let subend = self.guaranteed.join_remote_group((id, outbox), group, texts, home.clone());
                return Ok(GuaranteedSub { subend, route: None, durable: None });
            }
        }
        let subend = self.guaranteed.join_group(id, group, texts, filter, outbox)?;
        Ok(GuaranteedSub { subend, route: None, durable: None })
    }

    /// An UNSUBSCRIBE of a guaranteed subscription: a durable one is deleted.
    pub fn unsubscribe_guaranteed(&self, subscription: GuaranteedSub) {
        self.end_guaranteed(subscription, false);
    }

    /// The session holding a guaranteed subscription closed: a durable one stays for its
    /// next session.
    pub fn leave_guaranteed(&self, subscription: GuaranteedSub) {
        self.end_guaranteed(subscription, true);
    }

    /// Ends a guaranteed subscription for its session; a durable one is kept if `keep`.
    fn end_guaranteed(&self, subscription: GuaranteedSub, keep: bool) {
        match (&subscription.durable, keep) {
            (Some(name), true) => self.guaranteed.leave_durable(name, subscription.subend),
            (Some(name), false) => self.guaranteed.delete_durable(name, subscription.subend),
            (None, _) => self.guaranteed.unsubscribe(subscription.subend),
        }
        if let Some(filter) = subscription.route {
            self.cluster.unsubscribe(filter);
        }
    }

    /// A GPUBLISH: logged by the guaranteed driver, which answers PUBLISH_ACK on `reply` once
    /// it is durable (or PUBLISH_REFUSED).
    pub fn publish_guaranteed(&self, publish: GuaranteedPublish, reply: Arc<Outbox>) {
        self.guaranteed.publish(publish, reply, None);
    }

    /// Refuses a retained value with invalid reserved properties or past the store's limit.
    pub fn check_retained(&self, copy: &Message) -> Result<(), Notice> {
        reserved::check(copy)?;
        self.dispatcher.check_retained(copy)
    }

    /// A GPUBLISH that sets a retained value: `copy` is that value as a best-effort publish
    /// that only sets it (`$retain` and `$retain_only`). Refused at once if the retained store
    /// has no room for it; else the driver writes it to disk before logging the publish (so
    /// before acknowledging it), and then `copy` sets the value network-wide, as a best-effort
    /// retained publish does. The copy is applied here once the publish is accepted, before it
    /// is synced (what MQTT's retained publishes have always done): a subscriber may get a value
    /// whose publish is then refused, never an acknowledged one that a restart loses.
    pub fn publish_guaranteed_retained(
        &self,
        publish: GuaranteedPublish,
        reply: Arc<Outbox>,
        copy: Message,
        publisher: &mut Publisher,
    ) -> Result<(), Notice> {
        reserved::check(&copy)?;
        self.dispatcher.check_durable_retained(&copy)?;
        self.guaranteed.publish(publish, reply, Some(copy.clone()));
        if let Err(notice) = self.publish(&copy, publisher) {
            tracing::debug!(%notice, topic = copy.topic(), "a guaranteed retained value was not kept in memory");
        }
        Ok(())
    }

    /// The subscriber of `subscription` took everything of `pubend` up to `tick`.
    pub fn acknowledge(&self, subscription: &GuaranteedSub, pubend: tidings_wire::PubendId, tick: Tick) {
        self.guaranteed.delivery_ack(subscription.subend, pubend, tick);
    }

    /// What the router is told of a filter, when this broker has a cluster.
    fn route_filter(&self, pattern: &Pattern, selector: &Option<Selector>) -> Option<RouteFilter> {
        self.cluster.is_enabled().then(|| RouteFilter::new(pattern.clone(), selector.clone()))
    }
}

/// A queue key is a property name: non-empty and at most 255 bytes, like the selectors' names.
fn check_queue_key(key: &str) -> Result<(), Notice> {
    match !key.is_empty() && key.len() <= 255 && !key.chars().any(char::is_control) {
        true => Ok(()),
        false => Err(Notice::new(
            ReasonCode::InvalidQueueGroup,
            format!("{key:?} is not a property name to key a queue group by"),
        )),
    }
}
