//! Random operations against a simple model: appends, releases, lease raises, voids (after which
//! the pubend's ticks start again lower), clean reopens and power losses, on two pubends with
//! small segments. After every step the log must read back
//! exactly the model's unreleased records; after every reopen the recovered lease, release
//! prefix and dedup table must match it. `STORE_MODEL_SEEDS` sets how many seeds run.

#![allow(clippy::unwrap_used)] // helpers outside #[test] functions

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use support::{open, payload, record, Harness};
use tidings_store::{FsyncPolicy, MemFs, Options, PubendId, Record, Tick};

#[derive(Default)]
struct Model {
    records: BTreeMap<u64, Vec<Record>>,
    released: BTreeMap<u64, u64>,
    lease: BTreeMap<u64, u64>,
    /// Each pubend's last tick given.
    last: BTreeMap<u64, u64>,
}

impl Model {
    /// The next tick of `pubend`, a few above its last.
    fn next(&mut self, pubend: u64, rng: &mut fastrand::Rng) -> u64 {
        let last = self.last.entry(pubend).or_default();
        *last += rng.u64(1..5);
        *last
    }

    fn last(&self, pubend: u64) -> u64 {
        self.last.get(&pubend).copied().unwrap_or(0)
    }

    fn unreleased(&self, pubend: u64) -> Vec<Record> {
        let released = self.released.get(&pubend).copied().unwrap_or(0);
        let all = self.records.get(&pubend).cloned().unwrap_or_default();
        all.into_iter().filter(|r| r.tick.0 > released).collect()
    }
}

/// Odd seeds write without zeros ahead of the records (`Options::fill_ahead`, as a replica's
/// snapshots' store): recovery must find the same log either way.
fn options(seed: u64) -> Options {
    let fill_ahead = seed.is_multiple_of(2);
    Options { fsync: FsyncPolicy::Always, segment_bytes: 4096, reserve_bytes: 0, fill_ahead, ..Options::default() }
}

fn check_recovery(h: &Harness, model: &Model, seed: u64, step: usize) {
    for pubend in [1, 2] {
        let Some(state) = h.recovered.pubends.get(&PubendId(pubend)) else {
            assert!(model.records.get(&pubend).is_none_or(|r| r.is_empty()), "seed {seed}");
            continue;
        };
        let released = model.released.get(&pubend).copied().unwrap_or(0);
        assert_eq!(state.released, Tick(released), "seed {seed} step {step}: release prefix");
        let lease = model.lease.get(&pubend).copied().unwrap_or(0);
        assert_eq!(state.lease, Tick(lease), "seed {seed} step {step}: lease");
        let dedup: Vec<(u64, u64)> = state.dedup.iter().map(|(k, t)| (k.1 .0, t.0)).collect();
        let expected: Vec<(u64, u64)> = model.unreleased(pubend).iter().map(|r| (r.seq.0, r.tick.0)).collect();
        assert_eq!(dedup, expected, "seed {seed} step {step}: dedup table");
    }
}

fn run(seed: u64) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let fs = Arc::new(MemFs::new());
    let dir = Path::new("/log");
    let mut h = open(fs.clone(), dir, options(seed)).unwrap();
    let mut model = Model::default();
    for step in 0..120 {
        match rng.u8(0..11) {
            0..=5 => {
                let batch: Vec<Record> = (0..rng.usize(1..20))
                    .map(|_| {
                        let p = rng.u64(1..=2);
                        let t = model.next(p, &mut rng);
                        record(p, t, &payload(p, t, rng.usize(10..300)))
                    })
                    .collect();
                assert!(h.append_all(&batch).iter().all(|c| c.result.is_ok()), "seed {seed}");
                for r in batch {
                    model.records.entry(r.pubend.0).or_default().push(r);
                }
            }
            6 => {
                let p = rng.u64(1..=2);
                let upto = rng.u64(0..=model.last(p));
                assert!(h.release(p, upto).result.is_ok());
                let released = model.released.entry(p).or_default();
                *released = (*released).max(upto);
            }
            7 => {
                let p = rng.u64(1..=2);
                let lease = model.last(p) + rng.u64(0..2000);
                assert!(h.lease(p, lease).result.is_ok());
                let held = model.lease.entry(p).or_default();
                *held = (*held).max(lease);
            }
            10 => {
                // A void: the pubend's log is empty again, and its ticks go back.
                let p = rng.u64(1..=2);
                h.store.void(tidings_store::Token(0), PubendId(p)).unwrap();
                assert!(h.wait(1)[0].result.is_ok(), "seed {seed}: the void");
                model.records.remove(&p);
                model.released.remove(&p);
                model.lease.remove(&p);
                let back = rng.u64(0..=model.last(p));
                model.last.insert(p, back);
            }
            8 => {
                drop(h);
                h = open(fs.clone(), dir, options(seed)).unwrap();
                check_recovery(&h, &model, seed, step);
            }
            _ => {
                fs.power_loss(seed * 1000 + step as u64);
                drop(h);
                fs.restart();
                h = open(fs.clone(), dir, options(seed)).unwrap();
                check_recovery(&h, &model, seed, step);
            }
        }
        for p in [1, 2] {
            assert_eq!(h.records(p), model.unreleased(p), "seed {seed} step {step} pubend {p}");
        }
    }
    // Once everything is released, only the active segment (and at most the one before it) stays.
    for p in [1, 2] {
        assert!(h.release(p, model.last(p)).result.is_ok());
    }
    let t = model.last(1) + 1;
    assert!(h.append_all(&[record(1, t, &[1; 4000])])[0].result.is_ok());
    assert!(h.release(1, t).result.is_ok());
    let segments = fs.list_names(dir).iter().filter(|n| n.ends_with(".log")).count();
    assert!(segments <= 2, "seed {seed}: {segments} segments left after releasing everything");
}

#[test]
fn random_appends_releases_leases_reopens_and_power_losses_match_the_model() {
    let seeds = std::env::var("STORE_MODEL_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(30);
    for seed in 0..seeds {
        run(seed);
    }
}
