//! Which broker each pubend's stream comes from: its home (`docs/replication.md`, "Takeover").
//!
//! A pubend's home is the broker that hosts it: it lists the pubend in its link-state advert,
//! and every other broker keeps a stream of it routed from that home. A pubend's id never
//! changes, but its home does when a cell mate that leads the pubend's replica group takes it
//! over. Then two homes may be advertised for one id for a while: the successor's, and the dead
//! host's, whose advert lingers in the database until it ages out. Every broker follows the home
//! its view can reach, and moves a stream to another home only when the one it follows went out
//! of view: a reachable home is never dropped for another, so a stream does not flap.

use tidings_delivery::PubendId;
use tidings_route::PubendRef;

use super::driver::Driver;

impl Driver {
    /// The advertised pubends changed: keep a stream of every new remote one, and follow a
    /// pubend to a new home when the one followed is out of view. A pubend that leaves the
    /// adverts keeps its stream and its subends' places in it: its home may only be out of view
    /// for a while (its route is then empty, see `keep_unreachable_children`), and attaching
    /// again later would restart the subends at a guessed tick.
    pub(super) fn advertised(&mut self, pubends: Vec<PubendRef>) {
        let Some(net) = self.net.as_mut() else { return };
        net.advertised = pubends;
        self.rehome();
    }

    /// Applies the last advertised pubends: new remote ones get a stream, and a followed home
    /// out of view gives way to an advertised one in view.
    pub(super) fn rehome(&mut self) {
        let Some(net) = self.net.as_mut() else { return };
        let me = net.cluster.name().clone();
        let mut changed = Vec::new();
        for pubend in &net.advertised {
            let id = PubendId(pubend.id.0);
            // Ours (hosted, or taken over here): the old host's lingering advert is not followed.
            if pubend.home == me || self.hosted.contains(&id) {
                continue;
            }
            // A stream already here (this broker's log of it closed, `replicas::depose`) keeps
            // its subends where they are.
            let fresh = match net.remote.get(&id) {
                None => self.engine.inspect(id).is_none(),
                Some(current) if current.home == pubend.home => continue,
                Some(current) => {
                    // Out of view, or no longer advertising it (a deposed host that lives).
                    let gone = net.cluster.pubend_route(current).is_none() || !net.advertised.contains(current);
                    if !gone || net.cluster.pubend_route(pubend).is_none() {
                        continue;
                    }
                    tracing::info!(pubend = id.0, from = %current.home, to = %pubend.home, "the pubend's home moved");
                    net.cluster.handle(tidings_route::Input::UntrackPubend { pubend: current.clone() });
                    false
                }
            };
            net.remote.insert(id, pubend.clone());
            net.shared.write().homes.insert(id, pubend.home.clone());
            net.cluster.handle(tidings_route::Input::TrackPubend { pubend: pubend.clone() });
            changed.push((id, fresh));
        }
        for (id, fresh) in changed {
            self.refresh_route(id);
            if fresh {
                self.attach_late(id, None);
            }
        }
    }

    /// This broker's log of `pubend` closed (its replica group elected a mate, `replicas::depose`):
    /// routing stops advertising it here, and its stream follows the home the adverts show.
    pub(super) fn unhost(&mut self, pubend: PubendId) {
        let Some(net) = self.net.as_mut() else { return };
        let reference = PubendRef { id: tidings_route::PubendId(pubend.0), home: net.cluster.name().clone() };
        net.cluster.handle(tidings_route::Input::UntrackPubend { pubend: reference });
        self.rehome();
    }

    /// A pubend this broker hosts was opened: routing tracks it (so it is advertised and its
    /// next tick answers barriers) and its stream gets its route. A pubend taken over here had a
    /// stream followed from its old host: that one is dropped, the pubend is this broker's now.
    pub(super) fn host(&mut self, pubend: PubendId) {
        let Some(net) = self.net.as_mut() else { return };
        if let Some(old) = net.remote.remove(&pubend) {
            net.shared.write().homes.remove(&pubend);
            net.cluster.handle(tidings_route::Input::UntrackPubend { pubend: old });
        }
        let reference = PubendRef { id: tidings_route::PubendId(pubend.0), home: net.cluster.name().clone() };
        net.cluster.handle(tidings_route::Input::TrackPubend { pubend: reference });
        self.refresh_route(pubend);
    }
}
