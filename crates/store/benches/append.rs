//! Acknowledged appends of 256 B records through the store under `always`, at 1, 16 and 256 in
//! flight, beside raw write + fdatasync. Criterion reports time per acknowledged append: each
//! sample's time is the closed loop's own clock ([`Report::seconds`], from the first submit to
//! the last acknowledgement), so opening the store, creating the directory and closing the
//! store (which joins its writer thread) are not timed. The latency percentiles and group
//! sizes come from `tidings bench store`.
//!
//! `cargo bench -p tidings-store --bench append`

// criterion_group! generates undocumented functions; a bench that cannot run should stop loudly.
#![allow(missing_docs, clippy::expect_used)]

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tidings_store::measure::{raw_fdatasync, store_appends, Report, Workload};
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
                timed(&store_appends(dir.path(), &workload).expect("the store runs"), iters)
            })
        });
    }
    group.bench_function("raw_write_fdatasync", |b| {
        b.iter_custom(|iters| {
            let dir = tempfile::tempdir().expect("a temporary directory");
            timed(&raw_fdatasync(dir.path(), 256, iters).expect("the disk syncs"), iters)
        })
    });
    group.finish();
}

/// The appends' own time: the loop's clock, which starts after the store (or file) is open
/// and stops at the last acknowledgement, before it is closed.
fn timed(report: &Report, iters: u64) -> Duration {
    assert_eq!(report.acked, iters, "every append of the sample was acknowledged");
    Duration::from_secs_f64(report.seconds)
}

criterion_group!(benches, appends);
criterion_main!(benches);
