//! Time per published event for the seed 004, range and mixed workloads, against the naive loop
//! that evaluates every selector, and the no-selector hot path.
//!
//! `cargo bench -p tidings-matching --bench matching` (each group prints the matches per event
//! once, so time per event can be read against the work it implies).

// criterion_group! generates undocumented functions.
#![allow(missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, BenchmarkId, Criterion};

mod workloads;

use tidings_wire::Message;
use workloads::{Event, Subscription};

/// Events per workload; the benchmark cycles through them.
const EVENTS: usize = 4096;

fn quick(group: &mut BenchmarkGroup<'_, WallTime>) {
    group.sample_size(10).warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_secs(2));
}

/// Benchmarks `matches` over `events` for an index of `subscriptions`, and reports the average
/// number of matches per event.
fn bench_index(
    group: &mut BenchmarkGroup<'_, WallTime>,
    label: &str,
    parameter: usize,
    subscriptions: &[Subscription],
    events: &[Event],
) {
    let mut index = workloads::build(subscriptions);
    let mut out = Vec::new();
    let total: usize = events
        .iter()
        .map(|event| {
            out.clear();
            index.matches(&event.topic, &event.properties, &mut out);
            out.len()
        })
        .sum();
    eprintln!("{label}/{parameter}: {:.2} matches per event", total as f64 / events.len() as f64);
    let mut next = 0;
    group.bench_with_input(BenchmarkId::new(label, parameter), &parameter, |bencher, _| {
        bencher.iter(|| {
            let event = &events[next % events.len()];
            next += 1;
            out.clear();
            index.matches(&event.topic, &event.properties, &mut out);
            black_box(out.len())
        })
    });
    let stats = index.stats();
    eprintln!(
        "{label}/{parameter}: per publish {:.2} index hits, {:.2} selector evaluations, {:.2} unindexed checks",
        stats.index_hits as f64 / stats.publishes as f64,
        stats.selector_evaluations as f64 / stats.publishes as f64,
        stats.unindexed_checks as f64 / stats.publishes as f64,
    );
}

/// How the broker hands a published message's properties to the index.
#[derive(Clone, Copy)]
enum Reading {
    /// Decoded into owned values first, an allocation per key and per string value.
    Decoded,
    /// Read in place from the message buffer.
    View,
}

/// Benchmarks `matches` as the broker calls it, from encoded messages, so the cost of getting at
/// the properties is measured with the matching.
fn bench_encoded(
    group: &mut BenchmarkGroup<'_, WallTime>,
    reading: Reading,
    parameter: usize,
    subscriptions: &[Subscription],
    events: &[Event],
) {
    let mut index = workloads::build(subscriptions);
    let messages: Vec<Message> = events
        .iter()
        .map(|e| {
            Message::new(&e.topic, &e.properties, bytes::Bytes::new(), 0).unwrap_or_else(|error| panic!("{error}"))
        })
        .collect();
    let label = match reading {
        Reading::Decoded => "encoded, decoded",
        Reading::View => "encoded, view",
    };
    let mut out = Vec::new();
    let mut next = 0;
    group.bench_with_input(BenchmarkId::new(label, parameter), &parameter, |bencher, _| {
        bencher.iter(|| {
            let message = &messages[next % messages.len()];
            next += 1;
            out.clear();
            match reading {
                Reading::Decoded => index.matches(message.topic(), &message.properties(), &mut out),
                Reading::View => index.matches(message.topic(), &message.property_view(), &mut out),
            }
            black_box(out.len())
        })
    });
}

fn bench_naive(
    group: &mut BenchmarkGroup<'_, WallTime>,
    parameter: usize,
    subscriptions: &[Subscription],
    events: &[Event],
) {
    let mut out = Vec::new();
    let mut next = 0;
    group.bench_with_input(BenchmarkId::new("every selector", parameter), &parameter, |bencher, _| {
        bencher.iter(|| {
            let event = &events[next % events.len()];
            next += 1;
            out.clear();
            workloads::naive_matches(subscriptions, event, &mut out);
            black_box(out.len())
        })
    });
}

fn seed004(c: &mut Criterion) {
    let mut group = c.benchmark_group("seed004");
    quick(&mut group);
    for count in [1_000, 10_000, 100_000, 1_000_000] {
        let subscriptions = workloads::seed004_subscriptions(count);
        let events = workloads::seed004_events(count, EVENTS);
        bench_index(&mut group, "index", count, &subscriptions, &events);
        if count == 100_000 {
            bench_naive(&mut group, count, &subscriptions, &events);
            bench_encoded(&mut group, Reading::Decoded, count, &subscriptions, &events);
            bench_encoded(&mut group, Reading::View, count, &subscriptions, &events);
        }
    }
    group.finish();
}

fn range(c: &mut Criterion) {
    let mut group = c.benchmark_group("range");
    quick(&mut group);
    for count in [1_000, 10_000, 100_000] {
        let subscriptions = workloads::range_subscriptions(count);
        let events = workloads::range_events(count, EVENTS);
        bench_index(&mut group, "index", count, &subscriptions, &events);
        if count == 100_000 {
            bench_naive(&mut group, count, &subscriptions, &events);
        }
    }
    group.finish();
}

fn mixed(c: &mut Criterion) {
    let mut group = c.benchmark_group("mixed");
    quick(&mut group);
    for count in [1_000, 10_000, 100_000] {
        let subscriptions = workloads::mixed_subscriptions(count);
        let events = workloads::mixed_events(count, EVENTS);
        bench_index(&mut group, "index", count, &subscriptions, &events);
        if count == 100_000 {
            bench_naive(&mut group, count, &subscriptions, &events);
        }
    }
    group.finish();
}

/// The hot path without selectors: a cached topic with a fan-out of `fanout` subscribers.
fn topics_only(c: &mut Criterion) {
    let mut group = c.benchmark_group("topics_only");
    quick(&mut group);
    for fanout in [1, 10, 100] {
        let mut subscriptions = Vec::new();
        for i in 0..10_000 {
            subscriptions
                .push(Subscription { pattern: workloads::pattern(&format!("plant.line{i}.temp")), selector: None });
        }
        for i in 0..fanout {
            let text = if i % 2 == 0 { "plant.line7.*" } else { "plant.>" };
            subscriptions.push(Subscription { pattern: workloads::pattern(text), selector: None });
        }
        let events: Vec<Event> =
            (0..EVENTS).map(|_| Event { topic: "plant.line7.temp".to_owned(), properties: Vec::new() }).collect();
        bench_index(&mut group, "cached", fanout, &subscriptions, &events);
    }
    group.finish();
}

/// Subscribe then unsubscribe one seed 004 subscription in an index that already holds
/// `count`: the cost of churn, which must not grow with the index (no rebuild).
fn churn(c: &mut Criterion) {
    let mut group = c.benchmark_group("churn");
    quick(&mut group);
    for count in [1_000, 100_000] {
        let mut index = workloads::build(&workloads::seed004_subscriptions(count));
        let pattern = workloads::pattern("events");
        let selector = workloads::selector("t1 = 'a' AND t2 = 'b' AND t3 = 'c' AND t4 = -1");
        group.bench_with_input(BenchmarkId::new("subscribe and unsubscribe", count), &count, |bencher, _| {
            bencher.iter(|| {
                let id = index.insert(pattern.clone(), Some(selector.clone()), u32::MAX);
                black_box(index.remove(id))
            })
        });
    }
    group.finish();
}

/// Well-formed abuse: what one message or subscription can cost the broker. One message with
/// 65,535 properties, each named as one of 227 selectors' properties (repeated names: only the
/// first counts; property resolution must be linear in the message), and 30 subscriptions `big LIKE '%_..._b%'` (4,000 `_`) against a
/// 65,000-character property (a LIKE must be linear in the text).
fn abuse(c: &mut Criterion) {
    use tidings_wire::Property;
    let mut group = c.benchmark_group("abuse");
    quick(&mut group);
    let subscriptions: Vec<Subscription> = (0..227)
        .map(|i| Subscription {
            pattern: workloads::pattern("t"),
            selector: Some(workloads::selector(&format!("p{i} = {i}"))),
        })
        .collect();
    let properties = (0..65_535i64).map(|i| Property::new(format!("p{}", i % 227), -1i64)).collect();
    let events = [Event { topic: "t".to_owned(), properties }];
    bench_index(&mut group, "65535 properties, 227 selectors", 227, &subscriptions, &events);
    let like = format!("big LIKE '%{}b%'", "_".repeat(4000));
    let subscriptions: Vec<Subscription> = (0..30)
        .map(|_| Subscription { pattern: workloads::pattern("t"), selector: Some(workloads::selector(&like)) })
        .collect();
    let events = [Event { topic: "t".to_owned(), properties: vec![Property::new("big", "a".repeat(65_000))] }];
    bench_index(&mut group, "LIKE with 4000 _ over 65 KB", 30, &subscriptions, &events);
    group.finish();
}

criterion_group!(benches, topics_only, seed004, range, mixed, churn, abuse);
criterion_main!(benches);
