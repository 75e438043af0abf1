//! Acknowledged appends of 256 B records through the store under `always`, at 1, 16 and 256 in
//! flight, beside raw write + fdatasync. Criterion reports time per acknowledged append; the
//! latency percentiles and group sizes come from `tidings bench store`.
//!
//! `cargo bench -p tidings-store --bench append`

// criterion_group! generates undocumented functions; a bench that cannot run should stop loudly.
#![allow(missing_docs, clippy::expect_used)]

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tidings_store::measure::{raw_fdatasync, store_appends, Workload};
use tidings_store::FsyncPolicy;

fn appends(c: &mut Criterion) {
    let mut group = c.benchmark_group("store_append_256B_always");
    group.throughput(Throughput::Elements(1));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(5));
    for in_flight in [1, 16, 256] {
        group.bench_function(format!("in_flight_{in_flight}"), |b| {
            b.iter_custom(|iters| {
                let dir = tempfile::tempdir().expect("a temporary directory");
                let workload = Workload {
                    in_flight,
                    payload: 256,
                    duration: Duration::from_secs(3600),
                    max_appends: iters,
                    fsync: FsyncPolicy::Always,
                };
                let started = Instant::now();
                store_appends(dir.path(), &workload).expect("the store runs");
                started.elapsed()
            })
        });
    }
    group.bench_function("raw_write_fdatasync", |b| {
        b.iter_custom(|iters| {
            let dir = tempfile::tempdir().expect("a temporary directory");
            let started = Instant::now();
            raw_fdatasync(dir.path(), 256, iters).expect("the disk syncs");
            started.elapsed()
        })
    });
    group.finish();
}

criterion_group!(benches, appends);
criterion_main!(benches);
